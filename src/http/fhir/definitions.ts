/** The resource types of the data server and their rules (issue 3; spec §2.5–2.6, §4.3). */
import type { z } from 'zod';
import type { Content, ResourceType } from '../../domain/fhir/resource.js';
import type { ReferenceToCheck, ResourceDefinition } from '../../fhir/definitions.js';
import { referenceId } from '../../fhir/references.js';
import {
  encounterCreateSchema,
  encounterUpdateSchema,
  patientSchema,
  practitionerSchema,
} from './clinical.schema.js';
import {
  questionnaireResponseSchema,
  questionnaireSchema,
  taskSchema,
  valueSetSchema,
} from './workflow.schema.js';

const refs =
  (...paths: [element: string, type: ResourceType][]) =>
  (content: Content): ReferenceToCheck[] =>
    paths.flatMap(([element, type]) => {
      const id = referenceId(content[element], type);
      return id === undefined ? [] : [{ expression: `${element}`, resourceType: type, id }];
    });

const parser =
  (create: z.ZodType<Content>, update: z.ZodType<Content> = create) =>
  (body: unknown, mode: 'create' | 'update'): Content =>
    (mode === 'create' ? create : update).parse(body);

export const DEFINITIONS: Record<ResourceType, ResourceDefinition> = {
  Patient: {
    type: 'Patient',
    parse: parser(patientSchema),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: () => [],
    deleteBlockedBy: ['Encounter', 'Task', 'QuestionnaireResponse'],
  },
  Encounter: {
    type: 'Encounter',
    parse: parser(encounterCreateSchema, encounterUpdateSchema),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: refs(['subject', 'Patient']),
    deleteBlockedBy: ['Task', 'QuestionnaireResponse'],
  },
  Practitioner: {
    type: 'Practitioner',
    parse: parser(practitionerSchema),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: () => [],
    deleteBlockedBy: [],
  },
  Task: {
    type: 'Task',
    parse: parser(taskSchema),
    partialUpdate: false,
    uniqueIdentifiers: true,
    references: refs(
      ['for', 'Patient'],
      ['encounter', 'Encounter'],
      ['focus', 'QuestionnaireResponse'],
      ['owner', 'Practitioner'],
      ['requester', 'Practitioner'],
    ),
    deleteBlockedBy: [],
  },
  Questionnaire: {
    type: 'Questionnaire',
    parse: parser(questionnaireSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: () => [],
    deleteBlockedBy: [],
  },
  QuestionnaireResponse: {
    type: 'QuestionnaireResponse',
    parse: parser(questionnaireResponseSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: refs(['subject', 'Patient'], ['encounter', 'Encounter'], ['author', 'Practitioner']),
    deleteBlockedBy: [],
  },
  ValueSet: {
    type: 'ValueSet',
    parse: parser(valueSetSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: () => [],
    deleteBlockedBy: [],
  },
};
