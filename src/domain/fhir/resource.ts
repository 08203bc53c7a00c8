/**
 * One decider for every FHIR resource casebook stores (issue 3; docs/interface.md §2.5–2.7, §4.3): Patient,
 * Encounter, Practitioner, Task, Questionnaire, QuestionnaireResponse, ValueSet, and the clinical
 * resources pre-population reads (issue 35: Observation, Condition, MedicationStatement,
 * Medication, AllergyIntolerance, Immunization, DocumentReference). Stream `<type>-<id>`.
 *
 * Every event carries the resource's full content after it, so event n of a stream is version
 * n + 1 of the resource (`meta.versionId` = revision + 1) and history/vread fold the stream.
 * Event names are past tense and per type (CONVENTIONS.md): `PatientRegistered`,
 * `TaskStatusChanged`, `QuestionnaireResponseSubmitted`, …
 */
import { type Decider, DomainError, type Event } from '../decider.js';

/**
 * The clinical resources that pre-population reads (issue 35; docs/interface.md §2.7): stored as
 * sent once they pass the R5 schema, searched by the parameters of the R5 definitions.
 */
export const CLINICAL_TYPES = [
  'Observation',
  'Condition',
  'MedicationStatement',
  'Medication',
  'AllergyIntolerance',
  'Immunization',
  'DocumentReference',
] as const;
export type ClinicalType = (typeof CLINICAL_TYPES)[number];

export const isClinicalType = (value: string): value is ClinicalType =>
  (CLINICAL_TYPES as readonly string[]).includes(value);

export const RESOURCE_TYPES = [
  'Patient',
  'Encounter',
  'Practitioner',
  'Task',
  'Questionnaire',
  'QuestionnaireResponse',
  'ValueSet',
  ...CLINICAL_TYPES,
] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];

export const isResourceType = (value: string): value is ResourceType =>
  (RESOURCE_TYPES as readonly string[]).includes(value);

/** FHIR JSON of a resource without `resourceType`, `id` and `meta` (the server owns those). */
export type Content = { readonly [element: string]: unknown };

/** Event type names of one resource type. */
export interface ResourceEventNames {
  readonly created: string;
  readonly updated: string;
  readonly deleted: string;
  /** A status change gets its own event (Task, QuestionnaireResponse → completed). */
  readonly statusChanged?: string;
  /**
   * Status changes with an event of their own, by the status reached (QuestionnaireResponse →
   * `amended`, `entered-in-error`: src/domain/report/report.ts). Read as `statusChanged` events.
   */
  readonly statusEvents?: Readonly<Record<string, string>>;
}

/** `ObservationCreated`, `ObservationUpdated`, `ObservationDeleted`, … for each clinical type. */
function clinicalEventNames(): Record<ClinicalType, ResourceEventNames> {
  return Object.fromEntries(
    CLINICAL_TYPES.map((type) => [
      type,
      { created: `${type}Created`, updated: `${type}Updated`, deleted: `${type}Deleted` },
    ]),
  ) as Record<ClinicalType, ResourceEventNames>;
}

export const EVENT_NAMES: Record<ResourceType, ResourceEventNames> = {
  Patient: { created: 'PatientRegistered', updated: 'PatientUpdated', deleted: 'PatientDeleted' },
  Encounter: { created: 'EncounterRegistered', updated: 'EncounterUpdated', deleted: 'EncounterDeleted' },
  Practitioner: {
    created: 'PractitionerRegistered',
    updated: 'PractitionerUpdated',
    deleted: 'PractitionerDeleted',
  },
  Task: {
    created: 'TaskCreated',
    updated: 'TaskUpdated',
    deleted: 'TaskDeleted',
    statusChanged: 'TaskStatusChanged',
  },
  Questionnaire: {
    created: 'QuestionnaireCreated',
    updated: 'QuestionnaireUpdated',
    deleted: 'QuestionnaireDeleted',
  },
  QuestionnaireResponse: {
    created: 'QuestionnaireResponseCreated',
    updated: 'QuestionnaireResponseUpdated',
    deleted: 'QuestionnaireResponseDeleted',
    statusChanged: 'QuestionnaireResponseSubmitted',
    statusEvents: {
      completed: 'QuestionnaireResponseSubmitted',
      amended: 'QuestionnaireResponseAmended',
      'entered-in-error': 'QuestionnaireResponseEnteredInError',
    },
  },
  ValueSet: { created: 'ValueSetCreated', updated: 'ValueSetUpdated', deleted: 'ValueSetDeleted' },
  ...clinicalEventNames(),
};

/** Every event type name of one resource type (its statusEvents included). */
export const eventTypesOf = (names: ResourceEventNames): string[] => [
  ...new Set([
    names.created,
    names.updated,
    names.deleted,
    ...(names.statusChanged ? [names.statusChanged] : []),
    ...Object.values(names.statusEvents ?? {}),
  ]),
];

/** Which event a name is, for any resource type; undefined for other events. */
export const resourceEventKind = (
  eventType: string,
): { resourceType: ResourceType; kind: 'created' | 'updated' | 'deleted' | 'statusChanged' } | undefined =>
  EVENT_KINDS.get(eventType);

/** Every resource event name → its type and kind (one lookup per event of a replay). */
const EVENT_KINDS = new Map(
  RESOURCE_TYPES.flatMap((resourceType) =>
    (['created', 'updated', 'deleted', 'statusChanged'] as const).flatMap((kind) => {
      const name = EVENT_NAMES[resourceType][kind];
      return name === undefined ? [] : [[name, { resourceType, kind }] as const];
    }),
  ).concat(
    // amended, entered-in-error: read as statusChanged (src/domain/report/report.ts).
    RESOURCE_TYPES.flatMap((resourceType) =>
      Object.values(EVENT_NAMES[resourceType].statusEvents ?? {}).map(
        (name) => [name, { resourceType, kind: 'statusChanged' as const }] as const,
      ),
    ),
  ),
);

export interface CreatedData {
  readonly id: number;
  readonly tenantId: number;
  readonly resource: Content;
  readonly at: string;
  /** Questionnaire: the service-account project it belongs to (docs/interface.md §5.3 rule 3). */
  readonly project?: string;
  /** The session user who authored it (`Practitioner/<id>`), for `user/` scopes (docs/interface.md §5.3). */
  readonly author?: string;
}
export interface ChangedData {
  readonly id: number;
  readonly resource: Content;
  readonly at: string;
  /** On a status change: the status before. */
  readonly from?: string;
  /**
   * Who wrote a report version (`Practitioner/<id>`) and, for an amendment or entered in error,
   * the clinician's stated reason (src/domain/report/report.ts).
   */
  readonly reason?: string;
  readonly author?: string;
}

/** Why and by whom a version was written, kept in its event ({@link ChangedData}). */
export interface ChangeNote {
  readonly reason?: string;
  readonly author?: string;
}
export interface DeletedData {
  readonly id: number;
  readonly at: string;
}

export type ResourceEvent = Event<string, CreatedData | ChangedData | DeletedData>;

export type ResourceState =
  | { readonly status: 'none' }
  | {
      readonly status: 'active' | 'deleted';
      readonly resourceType: ResourceType;
      readonly id: number;
      readonly tenantId: number;
      readonly resource: Content;
      readonly lastUpdated: string;
      readonly project: string | undefined;
      readonly author: string | undefined;
    };

export type ResourceCommand =
  | {
      readonly type: 'CreateResource';
      readonly id: number;
      readonly tenantId: number;
      readonly resource: Content;
      readonly now: string;
      readonly project?: string;
      readonly author?: string;
    }
  | {
      readonly type: 'UpdateResource';
      readonly resource: Content;
      readonly now: string;
      /** Kept in the event: the reason of an amendment or of entered-in-error. */
      readonly note?: ChangeNote;
    }
  | { readonly type: 'DeleteResource'; readonly now: string };

const statusOf = (content: Content): string | undefined =>
  typeof content.status === 'string' ? content.status : undefined;

/** Canonical JSON (sorted keys) to tell whether an update (or a report's answer) changes anything. */
export const canonical = (value: unknown): string =>
  JSON.stringify(value, (_key, v) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );

/**
 * The event type of an update of `resourceType` from status `before` to `after`: Task status
 * changes are TaskStatusChanged (spec issue 3); a QuestionnaireResponse reaching `completed` is
 * QuestionnaireResponseSubmitted, `amended` (also from `amended`) QuestionnaireResponseAmended, `entered-in-error`
 * QuestionnaireResponseEnteredInError; anything else is the type's `updated` event.
 */
export const updateEventType = (
  resourceType: ResourceType,
  before: string | undefined,
  after: string | undefined,
): string => {
  const names = EVENT_NAMES[resourceType];
  if (names.statusChanged === undefined) return names.updated;
  if (resourceType === 'Task') return before === after ? names.updated : names.statusChanged;
  // A change to an amended response is another amendment (issue 32).
  if (before === after && after !== 'amended') return names.updated;
  return (after !== undefined ? names.statusEvents?.[after] : undefined) ?? names.updated;
};

/**
 * The decider of `resourceType`. Refusals: create on an existing stream (conflict), update or
 * delete of a missing resource (not_found), update of a deleted one (gone). Deleting a deleted
 * resource and an update that changes nothing decide no event.
 */
export const resourceDecider = (
  resourceType: ResourceType,
): Decider<ResourceCommand, ResourceState, ResourceEvent> => {
  const names = EVENT_NAMES[resourceType];
  return {
    initialState: { status: 'none' },
    evolve: (state, event) => {
      if (event.type === names.created) {
        const d = event.data as CreatedData;
        return {
          status: 'active',
          resourceType,
          id: d.id,
          tenantId: d.tenantId,
          resource: d.resource,
          lastUpdated: d.at,
          project: d.project,
          author: d.author,
        };
      }
      if (state.status === 'none') return state;
      if (event.type === names.updated || event.type === names.statusChanged) {
        const d = event.data as ChangedData;
        return { ...state, status: 'active', resource: d.resource, lastUpdated: d.at };
      }
      if (names.statusEvents && Object.values(names.statusEvents).includes(event.type)) {
        const d = event.data as ChangedData;
        return { ...state, status: 'active', resource: d.resource, lastUpdated: d.at };
      }
      if (event.type === names.deleted)
        return { ...state, status: 'deleted', lastUpdated: (event.data as DeletedData).at };
      return state;
    },
    decide: (command, state) => {
      switch (command.type) {
        case 'CreateResource': {
          if (state.status !== 'none')
            throw new DomainError(
              'conflict',
              'ResourceExists',
              `${resourceType}/${command.id} already exists`,
            );
          const data: CreatedData = {
            id: command.id,
            tenantId: command.tenantId,
            resource: command.resource,
            at: command.now,
            ...(command.project !== undefined ? { project: command.project } : {}),
            ...(command.author !== undefined ? { author: command.author } : {}),
          };
          return [{ type: names.created, data }];
        }
        case 'UpdateResource': {
          if (state.status === 'none')
            throw new DomainError('not_found', 'ResourceNotFound', `no ${resourceType} with this id`);
          if (state.status === 'deleted')
            throw new DomainError('gone', 'ResourceDeleted', `${resourceType}/${state.id} was deleted`);
          if (canonical(state.resource) === canonical(command.resource)) return [];
          const before = statusOf(state.resource);
          const type = updateEventType(resourceType, before, statusOf(command.resource));
          const note = {
            ...(command.note?.reason !== undefined ? { reason: command.note.reason } : {}),
            ...(command.note?.author !== undefined ? { author: command.note.author } : {}),
          };
          if (type !== names.updated)
            return [
              {
                type,
                data: {
                  id: state.id,
                  resource: command.resource,
                  at: command.now,
                  ...(before ? { from: before } : {}),
                  ...note,
                },
              },
            ];
          return [{ type, data: { id: state.id, resource: command.resource, at: command.now, ...note } }];
        }
        case 'DeleteResource':
          if (state.status === 'none')
            throw new DomainError('not_found', 'ResourceNotFound', `no ${resourceType} with this id`);
          if (state.status === 'deleted') return [];
          return [{ type: names.deleted, data: { id: state.id, at: command.now } }];
        default: {
          const _exhaustive: never = command;
          return [];
        }
      }
    },
  };
};

export const resourceStream = (resourceType: ResourceType, id: number): string => `${resourceType}-${id}`;
