/**
 * The audit trail (docs/architecture.md "Audit trail"; issue 14): who saw and changed what,
 * recorded in the log and shown as FHIR R5 AuditEvent resources. A batch of records (a group
 * commit) is one stream, `audit-<uuid>`, written once with one `AuditEventsRecorded` event that
 * carries its {@link AuditRecord}s — the facts of an AuditEvent, about a fifth of its JSON, from
 * which `toAuditEvent` (src/fhir/audit-event.ts) renders the resource. One event per batch, not per
 * record: an append's fixed cost (a row, its index entries, a seal link) is shared by every read of
 * the batch (docs/architecture.md "Audit trail"). Logs written before carry one
 * `AuditEventRecorded` event per record; both read the same way. Records hold references and codes
 * only, never patient data.
 */
import type { Decider, Event } from '../decider.js';

/** A FHIR R5 AuditEvent (JSON), with its id. */
export type AuditEventResource = Record<string, unknown> & {
  readonly resourceType: 'AuditEvent';
  readonly id: string;
};

/** AuditEvent.action (R5 audit-event-action): create, read, update, delete, execute. */
export type AuditAction = 'C' | 'R' | 'U' | 'D' | 'E';

/** Who acted: an API client, or a session (with its user's Practitioner). */
export type AuditAgent =
  | { readonly kind: 'client'; readonly clientId: string }
  | { readonly kind: 'session'; readonly sessionId: number; readonly practitionerId: number | null }
  | { readonly kind: 'system'; readonly name: string }
  | { readonly kind: 'anonymous' };

/** A resource (or another object) the action was about, and the patient it belongs to. */
export interface AuditEntity {
  /** `Patient/12`, or `Session/3` for casebook objects that are not FHIR resources. */
  readonly reference: string;
  readonly patientId?: number | null;
  /** The version written (a report's amendment, entered-in-error: issue 32). */
  readonly version?: number;
  /**
   * The clinician's stated reason for changing a signed-off report (issue 32): free text they
   * wrote for the record, the one exception to "references and codes only".
   */
  readonly reason?: string;
}

/** Everything one AuditEvent says. */
export interface AuditRecord {
  readonly id: string;
  readonly tenantId: number | null;
  /** What was done: a FHIR interaction (`read`, `search-type`, `create`…) or a casebook one (`launch`). */
  readonly interaction: string;
  readonly action: AuditAction;
  readonly recorded: string;
  /** HTTP status of the answer (or 200 for work without one, e.g. an export). */
  readonly status: number;
  readonly agent: AuditAgent;
  readonly entities: readonly AuditEntity[];
  readonly clientAddress?: string;
  readonly requestId?: string;
}

/**
 * The data of an `AuditEventRecorded` event: a record; logs written before records carry the whole
 * AuditEvent resource instead (read either way with `auditEventOf`, src/fhir/audit-event.ts).
 */
export type AuditEventRecordedData =
  | { readonly record: AuditRecord }
  | { readonly auditEvent: AuditEventResource };

/** The data of an `AuditEventsRecorded` event: the records of one group commit, in arrival order. */
export type AuditEventsRecordedData = { readonly records: readonly AuditRecord[] };

export type AuditEvent =
  | Event<'AuditEventsRecorded', AuditEventsRecordedData>
  | Event<'AuditEventRecorded', AuditEventRecordedData>;

export type AuditCommand = {
  readonly type: 'RecordAuditEvents';
  readonly records: readonly AuditRecord[];
};

export type AuditState = { readonly recorded: number };

/**
 * Records the batch as one event; a batch stream is written once (the handler appends it expected
 * `no_stream`). An empty batch records nothing.
 */
export const auditDecider: Decider<AuditCommand, AuditState, AuditEvent> = {
  initialState: { recorded: 0 },
  evolve: (state, event) => ({
    recorded: state.recorded + (event.type === 'AuditEventsRecorded' ? event.data.records.length : 1),
  }),
  decide: (command) =>
    command.records.length === 0 ? [] : [{ type: 'AuditEventsRecorded', data: { records: command.records } }],
};

/** The event type of a batch of records (the type written). */
export const AUDIT_EVENTS_RECORDED = 'AuditEventsRecorded';
/** The event type of one record, as logs written before batches carry it (read, never written). */
export const AUDIT_EVENT_RECORDED = 'AuditEventRecorded';
/** Whether an event of `type` holds AuditEvents. */
export const isAuditEventType = (type: string): boolean =>
  type === AUDIT_EVENTS_RECORDED || type === AUDIT_EVENT_RECORDED;

/** The stream of one group-committed batch. */
export const auditStream = (batchId: string): string => `audit-${batchId}`;
