/**
 * A patient's whole history in the log (issue 14; docs/architecture.md "Audit trail"): every event
 * that touched one patient of one tenant, in log order — the Patient's own stream; every Encounter,
 * Task and QuestionnaireResponse whose subject was the patient (from then on, their whole stream);
 * the sessions and launches opened for the patient; the exports of the patient's reports; and
 * every AuditEvent about the patient. An audit batch (`AuditEventsRecorded`) holds the records of
 * many requests: it is returned with only its records about the patient, never another's. One pass
 * over `$all`, memory bounded by the number of related streams, not by the log.
 */
import {
  AUDIT_EVENT_RECORDED,
  AUDIT_EVENTS_RECORDED,
  type AuditEventRecordedData,
  type AuditEventsRecordedData,
  type AuditRecord,
} from '../domain/audit/audit.js';
import { erasureStream, type PatientErasedData } from '../domain/erasure/erasure.js';
import { exportStream } from '../domain/export/export.js';
import { type Content, resourceEventKind, resourceStream } from '../domain/fhir/resource.js';
import type { EventStore, Position, RecordedEvent } from '../eventstore/port.js';
import { auditEventOf, toAuditEvent } from '../fhir/audit-event.js';
import { compartmentOf } from '../fhir/references.js';
import { auditIndex } from '../projections/audit-events.js';

const PAGE = 2000;

export interface PatientEventsOptions {
  /** Only events recorded at or after this instant (ISO 8601). */
  readonly since?: string;
  /** Only events recorded at or before this instant (ISO 8601). */
  readonly until?: string;
  /** Told after each page: events read so far and the position reached. */
  readonly onProgress?: (read: number, position: Position) => void;
}

/**
 * The events of `$all` that touched `patientId` in `tenantId`, in log order.
 * Events of other tenants are never returned.
 */
export async function* patientEvents(
  store: EventStore,
  tenantId: number,
  patientId: number,
  options: PatientEventsOptions = {},
): AsyncGenerator<RecordedEvent> {
  const related = new Set<string>([resourceStream('Patient', patientId), erasureStream(patientId)]);
  // An erased patient's events hold no data to tell whose they are: its erasure names its streams.
  for (const erasure of await store.readStream(erasureStream(patientId)))
    for (const r of (erasure.data as PatientErasedData).resources) {
      related.add(`${r.resourceType}-${r.id}`);
      if (r.resourceType === 'QuestionnaireResponse') related.add(exportStream(r.id));
    }
  const since = options.since ? Date.parse(options.since) : undefined;
  const until = options.until ? Date.parse(options.until) : undefined;
  const within = (event: RecordedEvent) => {
    const at = Date.parse(event.metadata.recordedAt);
    return (since === undefined || at >= since) && (until === undefined || at <= until);
  };
  let from: Position | undefined;
  let read = 0;
  for (;;) {
    const page = await store.readAll({ ...(from ? { from } : {}), maxCount: PAGE });
    if (page.length === 0) return;
    for (const event of page) {
      if (event.metadata.tenantId !== tenantId || !within(event)) continue;
      if (event.type === AUDIT_EVENTS_RECORDED) {
        const records = (event.data as AuditEventsRecordedData).records.filter((r) => about(r, patientId));
        if (records.length > 0) yield { ...event, data: { records } };
      } else if (touches(event, patientId, related)) yield event;
    }
    read += page.length;
    from = page.at(-1)!.position;
    options.onProgress?.(read, from);
  }
}

/** Whether an audit record names the patient (as an entity or an entity's patient). */
const about = (record: AuditRecord, patientId: number): boolean =>
  auditIndex(toAuditEvent(record)).patients.includes(patientId);

/** Whether `event` touched the patient; remembers streams that belong to the patient from now on. */
const touches = (event: RecordedEvent, patientId: number, related: Set<string>): boolean => {
  if (related.has(event.streamName)) return true;
  if (event.erased) return false;
  const kind = resourceEventKind(event.type);
  if (kind) {
    const data = event.data as { id?: number; resource?: Content };
    if (!data.resource || typeof data.id !== 'number') return false;
    if (compartmentOf(kind.resourceType, data.id, data.resource).patientId !== patientId) return false;
    related.add(event.streamName);
    if (kind.resourceType === 'QuestionnaireResponse') related.add(exportStream(data.id));
    return true;
  }
  switch (event.type) {
    case 'SessionCreated':
      if ((event.data as { patientId?: number | null }).patientId !== patientId) return false;
      related.add(event.streamName);
      return true;
    case 'LaunchAccepted':
      return (event.data as { patientId?: number }).patientId === patientId;
    case AUDIT_EVENT_RECORDED:
      return auditIndex(auditEventOf(event.data as AuditEventRecordedData)).patients.includes(patientId);
    default:
      return false;
  }
};
