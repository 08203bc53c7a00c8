/**
 * What casebook knows about each resource type it stores (issue 3): how a request body becomes
 * stored content, whether updates are partial (docs/interface.md §4.3 rule 3), whether identifiers are unique
 * in the tenant (docs/interface.md §4.3 rule 1), which references must resolve, and what blocks a delete
 * (docs/interface.md §4.3 rule 4).
 */
import type { z } from 'zod';
import type { Content, ResourceType } from '../domain/fhir/resource.js';
import {
  encounterCreateSchema,
  encounterUpdateSchema,
  patientSchema,
  practitionerSchema,
} from './clinical.schema.js';
import { referenceId } from './references.js';
import {
  questionnaireResponseSchema,
  questionnaireSchema,
  taskSchema,
  valueSetSchema,
} from './workflow.schema.js';

export interface ReferenceToCheck {
  /** FHIRPath of the element, for OperationOutcome.issue.expression. */
  readonly expression: string;
  readonly resourceType: ResourceType;
  readonly id: number;
}

export interface ResourceDefinition {
  readonly type: ResourceType;
  /**
   * Turns a request body into content (no resourceType/id/meta).
   * `mode` `update` allows omitting elements required on create (partial updates).
   * @throws {ZodError} or {DomainError} for invalid content (answered 422).
   */
  readonly parse: (body: unknown, mode: 'create' | 'update') => Content;
  /** docs/interface.md §4.3 rule 3: omitted elements stay unchanged, a given identifier list replaces the old one. */
  readonly partialUpdate: boolean;
  /** docs/interface.md §4.3 rule 1: an identifier belongs to at most one resource of this type in a tenant. */
  readonly uniqueIdentifiers: boolean;
  /** The literal references in `content` that must point at existing resources of the tenant. */
  readonly references: (content: Content) => ReferenceToCheck[];
  /** docs/interface.md §4.3 rule 4: resource types whose live resources, referencing this one, block its delete. */
  readonly deleteBlockedBy: readonly ResourceType[];
  /**
   * The resources a reader of this resource is shown with (the app host opens a Task's Patient,
   * Encounter and report, docs/interface.md §3.2): whoever writes it must be allowed to read each
   * one that exists (docs/interface.md §2.6; issue 33).
   */
  readonly shownWith: (content: Content) => ReferenceToCheck[];
}

const refs =
  (...paths: [element: string, type: ResourceType][]) =>
  (content: Content): ReferenceToCheck[] =>
    paths.flatMap(([element, type]) => {
      const id = referenceId(content[element], type);
      return id === undefined ? [] : [{ expression: `${element}`, resourceType: type, id }];
    });

/** A reference as the app host follows it: relative (`Patient/12`) or absolute (`https://…/Patient/12`). */
const followed = (reference: unknown, type: ResourceType): number | undefined =>
  referenceId(reference, type, { absolute: true });

/** Every QuestionnaireResponse a Task names: its `focus`, then its `output` valueReferences. */
const taskResponses = (task: Content): ReferenceToCheck[] => {
  const outputs = Array.isArray(task.output) ? (task.output as { valueReference?: unknown }[]) : [];
  return [
    { expression: 'focus', id: followed(task.focus, 'QuestionnaireResponse') },
    ...outputs.map((o, i) => ({
      expression: `output[${i}].valueReference`,
      id: followed(o?.valueReference, 'QuestionnaireResponse'),
    })),
  ].flatMap(({ expression, id }) =>
    id === undefined ? [] : [{ expression, resourceType: 'QuestionnaireResponse' as const, id }],
  );
};

/**
 * What the app host opens from a Task (docs/interface.md §3.2): its Patient (`for`), its Encounter,
 * and its QuestionnaireResponse — `focus`, else the first `output` valueReference to one.
 */
export const taskLinks = (
  task: Content,
): { patientId?: number; encounterId?: number; responseId?: number } => {
  const responses = taskResponses(task);
  const patientId = followed(task.for, 'Patient');
  const encounterId = followed(task.encounter, 'Encounter');
  return {
    ...(patientId !== undefined ? { patientId } : {}),
    ...(encounterId !== undefined ? { encounterId } : {}),
    ...(responses[0] !== undefined ? { responseId: responses[0].id } : {}),
  };
};

/** {@link ResourceDefinition.shownWith} of a Task: everything {@link taskLinks} may open. */
const taskShownWith = (task: Content): ReferenceToCheck[] => {
  const { patientId, encounterId } = taskLinks(task);
  return [
    ...(patientId !== undefined
      ? [{ expression: 'for', resourceType: 'Patient' as const, id: patientId }]
      : []),
    ...(encounterId !== undefined
      ? [{ expression: 'encounter', resourceType: 'Encounter' as const, id: encounterId }]
      : []),
    ...taskResponses(task),
  ];
};

const parser =
  (create: z.ZodType<Content>, update: z.ZodType<Content> = create) =>
  (body: unknown, mode: 'create' | 'update'): Content =>
    (mode === 'create' ? create : update).parse(body);

/** The rules of every resource type the data server stores (issue 3; docs/interface.md §2.5–2.6, §4.3). */
export const DEFINITIONS: Record<ResourceType, ResourceDefinition> = {
  Patient: {
    type: 'Patient',
    parse: parser(patientSchema),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: () => [],
    deleteBlockedBy: ['Encounter', 'Task', 'QuestionnaireResponse'],
    shownWith: () => [],
  },
  Encounter: {
    type: 'Encounter',
    parse: parser(encounterCreateSchema, encounterUpdateSchema),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: refs(['subject', 'Patient']),
    deleteBlockedBy: ['Task', 'QuestionnaireResponse'],
    shownWith: () => [],
  },
  Practitioner: {
    type: 'Practitioner',
    parse: parser(practitionerSchema),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: () => [],
    deleteBlockedBy: [],
    shownWith: () => [],
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
    shownWith: taskShownWith,
  },
  Questionnaire: {
    type: 'Questionnaire',
    parse: parser(questionnaireSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: () => [],
    deleteBlockedBy: [],
    shownWith: () => [],
  },
  QuestionnaireResponse: {
    type: 'QuestionnaireResponse',
    parse: parser(questionnaireResponseSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: refs(['subject', 'Patient'], ['encounter', 'Encounter'], ['author', 'Practitioner']),
    deleteBlockedBy: [],
    shownWith: () => [],
  },
  ValueSet: {
    type: 'ValueSet',
    parse: parser(valueSetSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: () => [],
    deleteBlockedBy: [],
    shownWith: () => [],
  },
};
