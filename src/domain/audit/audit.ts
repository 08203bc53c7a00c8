/**
 * The audit trail (docs/architecture.md "Audit trail"; issue 14): who saw and changed what, as FHIR
 * R5 AuditEvent resources recorded in the log. A batch of records (a group commit) is one stream,
 * `audit-<uuid>`, written once: `AuditEventRecorded` events, each carrying a whole AuditEvent.
 * AuditEvents hold references and codes only, never patient data.
 */
import type { Decider, Event } from '../decider.js';

/** A FHIR R5 AuditEvent (JSON), with its id. */
export type AuditEventResource = Record<string, unknown> & {
  readonly resourceType: 'AuditEvent';
  readonly id: string;
};

export type AuditEvent = Event<'AuditEventRecorded', { readonly auditEvent: AuditEventResource }>;

export type AuditCommand = {
  readonly type: 'RecordAuditEvents';
  readonly auditEvents: readonly AuditEventResource[];
};

export type AuditState = { readonly recorded: number };

/** Records the batch; a batch stream is written once (the handler appends it expected `no_stream`). */
export const auditDecider: Decider<AuditCommand, AuditState, AuditEvent> = {
  initialState: { recorded: 0 },
  evolve: (state) => ({ recorded: state.recorded + 1 }),
  decide: (command) =>
    command.auditEvents.map((auditEvent) => ({ type: 'AuditEventRecorded', data: { auditEvent } })),
};

export const AUDIT_EVENT_RECORDED = 'AuditEventRecorded';

/** The stream of one group-committed batch. */
export const auditStream = (batchId: string): string => `audit-${batchId}`;
