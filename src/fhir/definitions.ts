/**
 * What casebook knows about each resource type it stores (issue 3): how a request body becomes
 * stored content, whether updates are partial (docs/interface.md §4.3 rule 3), whether identifiers are unique
 * in the tenant (docs/interface.md §4.3 rule 1), which references must resolve, and what blocks a delete
 * (docs/interface.md §4.3 rule 4).
 */
import { ZodError, type z } from 'zod';
import {
  CLINICAL_TYPES,
  type ClinicalType,
  type Content,
  isResourceType,
  type ResourceType,
} from '../domain/fhir/resource.js';
import {
  encounterCreateSchema,
  encounterUpdateSchema,
  patientSchema,
  practitionerSchema,
} from './clinical.schema.js';
import { r5SchemaIssues } from './r5-schema.js';
import { CLINICAL_COMPARTMENT, referenceId, resourceIdIn } from './references.js';
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
  /**
   * docs/interface.md §4.3 rule 4: resource types whose live resources, referencing this one,
   * block its delete.
   */
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

/**
 * The parser of a type with a zod schema: the body must pass the FHIR R5 JSON schema of the type
 * (issue 35: what passes is stored, nothing is dropped in silence; a partial update requires no
 * element) and casebook's own rules (the zod schema: docs/interface.md §2.5–2.6). Every problem of
 * both is one issue; where both name an element, casebook's message stands.
 * @throws {ZodError}
 */
const parser =
  (type: ResourceType, create: z.ZodType<Content>, update: z.ZodType<Content> = create, partial = false) =>
  (body: unknown, mode: 'create' | 'update'): Content => {
    const r5 = r5SchemaIssues(type, body, { partial: partial && mode === 'update' });
    const own = (mode === 'create' ? create : update).safeParse(body);
    const ownPaths = new Set(own.success ? [] : own.error.issues.map((i) => JSON.stringify(i.path)));
    const issues = [
      ...(own.success ? [] : own.error.issues),
      ...r5.filter((i) => !ownPaths.has(JSON.stringify(i.path))),
    ];
    if (issues.length > 0) throw new ZodError(issues);
    return (own as { data: Content }).data;
  };

/**
 * The references of a clinical resource that casebook follows (docs/interface.md §2.7): its
 * Patient (`subject`/`patient`), its `encounter`, and a MedicationStatement's Medication
 * (`medication.reference`). Each must name a live resource of the tenant when it names one of
 * casebook's types by a relative reference.
 */
const clinicalReferences =
  (type: ClinicalType) =>
  (content: Content): ReferenceToCheck[] => {
    const { patient, encounter } = CLINICAL_COMPARTMENT[type];
    const found: ReferenceToCheck[] = [];
    const add = (expression: string, value: unknown, target: ResourceType) => {
      const id = referenceId(value, target);
      if (id !== undefined) found.push({ expression, resourceType: target, id });
    };
    if (patient) add(patient, content[patient], 'Patient');
    if (encounter) add('encounter', content.encounter, 'Encounter');
    if (type === 'MedicationStatement')
      add(
        'medication.reference',
        (content.medication as { reference?: unknown } | undefined)?.reference,
        'Medication',
      );
    return found;
  };

/**
 * A relative reference `Type/<id>` to one of casebook's types whose id is not one casebook can hold
 * (`Patient/example`): it names nothing on this server, so the body is refused (422) rather than
 * stored pointing nowhere (docs/interface.md §2.6 "References between stored resources").
 */
const unresolvableReferences = (body: Record<string, unknown>, paths: readonly (readonly string[])[]) =>
  paths.flatMap((path): z.core.$ZodIssue[] => {
    let value: unknown = body;
    for (const step of path) value = (value as Record<string, unknown> | undefined)?.[step];
    const reference = (value as { reference?: unknown } | undefined)?.reference;
    if (typeof reference !== 'string') return [];
    const parts = reference.split('/');
    if (parts.length !== 2 || !isResourceType(parts[0]!) || resourceIdIn(parts[1]!) !== undefined) return [];
    return [
      {
        code: 'custom',
        path: [...path, 'reference'],
        message: `${reference} names no resource casebook can hold (ids are integers)`,
        input: undefined,
      },
    ];
  });

/**
 * The parser of a clinical type (issue 35; docs/interface.md §2.7): the body must pass the FHIR R5
 * JSON schema of the type, and is stored as sent (without `resourceType`, `id` and `meta`, which
 * are the server's).
 * @throws {ZodError} one issue per problem.
 */
const clinicalParser =
  (type: ClinicalType) =>
  (body: unknown): Content => {
    const { patient, encounter } = CLINICAL_COMPARTMENT[type];
    const issues = [
      ...r5SchemaIssues(type, body),
      ...unresolvableReferences(body as Record<string, unknown>, [
        ...(patient ? [[patient]] : []),
        ...(encounter ? [['encounter']] : []),
        ...(type === 'MedicationStatement' ? [['medication']] : []),
      ]),
    ];
    if (issues.length > 0) throw new ZodError(issues);
    const { resourceType: _r, id: _i, meta: _m, ...content } = body as Record<string, unknown>;
    return content;
  };

/** The clinical types whose resources belong to a Patient's or an Encounter's compartment. */
const clinicalTypesWith = (compartment: 'patient' | 'encounter'): ClinicalType[] =>
  CLINICAL_TYPES.filter((type) => CLINICAL_COMPARTMENT[type][compartment]);

/** The definition of a clinical type: stored as sent, replaced whole on update, no unique identifiers. */
const clinicalDefinition = (type: ClinicalType): ResourceDefinition => ({
  type,
  parse: clinicalParser(type),
  partialUpdate: false,
  uniqueIdentifiers: false,
  references: clinicalReferences(type),
  deleteBlockedBy: [],
  shownWith: () => [],
});

/** The rules of every resource type the data server stores (issue 3; docs/interface.md §2.5–2.6, §4.3). */
export const DEFINITIONS: Record<ResourceType, ResourceDefinition> = {
  Patient: {
    type: 'Patient',
    parse: parser('Patient', patientSchema, patientSchema, true),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: () => [],
    deleteBlockedBy: ['Encounter', 'Task', 'QuestionnaireResponse', ...clinicalTypesWith('patient')],
    shownWith: () => [],
  },
  Encounter: {
    type: 'Encounter',
    parse: parser('Encounter', encounterCreateSchema, encounterUpdateSchema, true),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: refs(['subject', 'Patient']),
    deleteBlockedBy: ['Task', 'QuestionnaireResponse', ...clinicalTypesWith('encounter')],
    shownWith: () => [],
  },
  Practitioner: {
    type: 'Practitioner',
    parse: parser('Practitioner', practitionerSchema, practitionerSchema, true),
    partialUpdate: true,
    uniqueIdentifiers: true,
    references: () => [],
    deleteBlockedBy: [],
    shownWith: () => [],
  },
  Task: {
    type: 'Task',
    parse: parser('Task', taskSchema),
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
    parse: parser('Questionnaire', questionnaireSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: () => [],
    deleteBlockedBy: [],
    shownWith: () => [],
  },
  QuestionnaireResponse: {
    type: 'QuestionnaireResponse',
    parse: parser('QuestionnaireResponse', questionnaireResponseSchema),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: refs(['subject', 'Patient'], ['encounter', 'Encounter'], ['author', 'Practitioner']),
    deleteBlockedBy: [],
    shownWith: () => [],
  },
  ValueSet: {
    type: 'ValueSet',
    parse: (body) => valueSetSchema.parse(body),
    partialUpdate: false,
    uniqueIdentifiers: false,
    references: () => [],
    deleteBlockedBy: [],
    shownWith: () => [],
  },
  ...(Object.fromEntries(CLINICAL_TYPES.map((type) => [type, clinicalDefinition(type)])) as Record<
    ClinicalType,
    ResourceDefinition
  >),
};
