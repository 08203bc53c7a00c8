/** The search parameters the data server implements (issue 3), per resource type. */
import type { ResourceType } from '../domain/fhir/resource.js';

export type SearchParameter =
  | { readonly kind: 'id' }
  | { readonly kind: 'token'; readonly path: string }
  /** A reference to the Patient compartment (subject, for, patient). */
  | { readonly kind: 'patient'; readonly path: string }
  | { readonly kind: 'encounter'; readonly path: string }
  /** Equality on a top-level string element. */
  | { readonly kind: 'element'; readonly element: string; readonly type: 'uri' | 'token' };

export interface TypeSearch {
  readonly parameters: Readonly<Record<string, SearchParameter>>;
  readonly _include?: readonly string[];
}

const id: SearchParameter = { kind: 'id' };

export const SEARCH_PARAMETERS: Record<ResourceType, TypeSearch> = {
  Patient: { parameters: { _id: id, identifier: { kind: 'token', path: 'Patient.identifier' } } },
  Practitioner: { parameters: { _id: id, identifier: { kind: 'token', path: 'Practitioner.identifier' } } },
  Encounter: {
    parameters: {
      _id: id,
      identifier: { kind: 'token', path: 'Encounter.identifier' },
      subject: { kind: 'patient', path: 'Encounter.subject' },
      patient: { kind: 'patient', path: 'Encounter.subject' },
    },
  },
  Task: {
    parameters: {
      _id: id,
      identifier: { kind: 'token', path: 'Task.identifier' },
      patient: { kind: 'patient', path: 'Task.for' },
      subject: { kind: 'patient', path: 'Task.for' },
      encounter: { kind: 'encounter', path: 'Task.encounter' },
      status: { kind: 'element', element: 'status', type: 'token' },
    },
  },
  Questionnaire: {
    parameters: {
      _id: id,
      url: { kind: 'element', element: 'url', type: 'uri' },
      version: { kind: 'element', element: 'version', type: 'token' },
      identifier: { kind: 'token', path: 'Questionnaire.identifier' },
    },
  },
  QuestionnaireResponse: {
    parameters: {
      _id: id,
      subject: { kind: 'patient', path: 'QuestionnaireResponse.subject' },
      patient: { kind: 'patient', path: 'QuestionnaireResponse.subject' },
      encounter: { kind: 'encounter', path: 'QuestionnaireResponse.encounter' },
    },
    _include: ['QuestionnaireResponse:subject', 'QuestionnaireResponse:encounter'],
  },
  ValueSet: {
    parameters: {
      _id: id,
      url: { kind: 'element', element: 'url', type: 'uri' },
      version: { kind: 'element', element: 'version', type: 'token' },
    },
  },
};
