/**
 * The audit trail (docs/architecture.md "Audit trail"; issue 14): who saw and changed what,
 * recorded in the log and shown as FHIR R5 AuditEvent resources. A batch of records (a group
 * commit) is one stream, `audit-<uuid>`, written once: `AuditEventRecorded` events, each carrying
 * one {@link AuditRecord} — the facts of an AuditEvent, about a fifth of its JSON, from which
 * `toAuditEvent` (src/fhir/audit-event.ts) renders the resource. Records hold references and codes
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

export type AuditEvent = Event<'AuditEventRecorded', AuditEventRecordedData>;

export type AuditCommand = {
  readonly type: 'RecordAuditEvents';
  readonly records: readonly AuditRecord[];
};

export type AuditState = { readonly recorded: number };

/** Records the batch; a batch stream is written once (the handler appends it expected `no_stream`). */
export const auditDecider: Decider<AuditCommand, AuditState, AuditEvent> = {
  initialState: { recorded: 0 },
  evolve: (state) => ({ recorded: state.recorded + 1 }),
  decide: (command) => command.records.map((record) => ({ type: 'AuditEventRecorded', data: { record } })),
};

export const AUDIT_EVENT_RECORDED = 'AuditEventRecorded';

/** The stream of one group-committed batch. */
export const auditStream = (batchId: string): string => `audit-${batchId}`;
