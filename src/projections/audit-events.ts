/**
 * Read model of the audit trail (issue 14; docs/interface.md §4.3): `rm_audit_events` holds each
 * AuditEvent with what it is searched by — tenant, time, action, outcome, agents, entities and
 * patients (arrays with GIN indexes). Set-based, idempotent (one row per AuditEvent id).
 */
import {
  AUDIT_EVENTS_RECORDED,
  type AuditEventResource,
  type AuditEventsRecordedData,
  type AuditRecord,
  isAuditEventType,
} from '../domain/audit/audit.js';
import { agentKeys, auditEventsIn, CLIENT_SYSTEM, outcomeCode, SESSION_SYSTEM } from '../fhir/audit-event.js';
import { idInReference, MAX_RESOURCE_ID } from '../fhir/references.js';
import { type ApplyColumn, arrayRows, arrayValues, migrateReadModel, type Projection } from './projection.js';

type Ref = { reference?: string; identifier?: { system?: string; value?: string } };

const refKey = (ref: Ref | undefined): string | undefined =>
  ref?.reference ??
  (ref?.identifier?.value ? `${ref.identifier.system ?? ''}|${ref.identifier.value}` : undefined);

/** What an AuditEvent is searched by. */
export const auditIndex = (event: AuditEventResource) => {
  // An API client is also found by its bare client_id (`agent=demo-ehr`).
  const agents = ((event.agent as { who?: Ref }[] | undefined) ?? []).flatMap((a) => {
    const key = refKey(a.who);
    const bare = a.who?.identifier?.system === CLIENT_SYSTEM ? a.who.identifier.value : undefined;
    return [key, bare].filter((k): k is string => typeof k === 'string');
  });
  const entityList =
    (event.entity as
      | { what?: Ref; detail?: { valueString?: string; valueReference?: Ref }[] }[]
      | undefined) ?? [];
  const entities = entityList.map((e) => refKey(e.what)).filter((k): k is string => typeof k === 'string');
  const patientRefs = [
    (event.patient as Ref | undefined)?.reference,
    ...entityList.map((e) => e.what?.reference),
    // The patient of each entity (valueReference: AuditEvents recorded before it became a string).
    ...entityList.flatMap((e) => (e.detail ?? []).map((d) => d.valueString ?? d.valueReference?.reference)),
  ];
  const patients = [
    ...new Set(
      patientRefs.flatMap((r) => {
        const id = typeof r === 'string' ? idInReference(r, 'Patient') : undefined;
        return id === undefined ? [] : [id];
      }),
    ),
  ];
  const outcome = (event.outcome as { code?: { code?: string } } | undefined)?.code?.code ?? '0';
  const code = (event.code as { coding?: { code?: string }[] } | undefined)?.coding?.[0]?.code ?? '';
  return { agents: [...new Set(agents)], entities: [...new Set(entities)], patients, outcome, code };
};

/** A patient id the resource's `Patient/<id>` reference would be indexed by. */
const isPatientNumber = (n: unknown): n is number =>
  typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= MAX_RESOURCE_ID;

/**
 * What the AuditEvent of `record` is searched by, read off the record without rendering the
 * resource: the same keys as {@link auditIndex} of `toAuditEvent(record)` (a test holds them
 * equal), at a fraction of the cost for every record of the trail.
 */
export const recordIndex = (record: AuditRecord): ReturnType<typeof auditIndex> => {
  const agents = agentKeys(record.agent);
  const entities: string[] = [];
  const patients: number[] = [];
  // AuditEvent.patient: the one patient of the entities, when there is exactly one.
  const all = new Set(record.entities.map((e) => e.patientId).filter((p) => typeof p === 'number'));
  if (all.size === 1) {
    const [only] = all;
    if (isPatientNumber(only)) patients.push(only);
  }
  for (const entity of record.entities) {
    const slash = entity.reference.indexOf('/');
    const type = entity.reference.slice(0, slash);
    entities.push(
      type === 'Session' ? `${SESSION_SYSTEM}|${entity.reference.slice(slash + 1)}` : entity.reference,
    );
    const own = type === 'Patient' ? idInReference(entity.reference, 'Patient') : undefined;
    if (own !== undefined) patients.push(own);
    if (type !== 'Patient' && isPatientNumber(entity.patientId)) patients.push(entity.patientId);
  }
  return {
    agents: [...new Set(agents)],
    entities: [...new Set(entities)],
    patients: [...new Set(patients)],
    outcome: outcomeCode(record.status),
    code: record.interaction,
  };
};

/** The rows of one event of the log: a batch's records indexed straight from them, else via the resource. */
const rowsOf = (event: { type: string; data: unknown; metadata: { tenantId: number | null } }) =>
  event.type === AUDIT_EVENTS_RECORDED
    ? (event.data as AuditEventsRecordedData).records.map((record) => ({
        id: record.id,
        tenant_id: event.metadata.tenantId,
        recorded: record.recorded,
        action: record.action,
        ...recordIndex(record),
        content: record,
      }))
    : auditEventsIn(event).map(({ resource, content }) => ({
        id: resource.id,
        tenant_id: event.metadata.tenantId,
        recorded: resource.recorded,
        action: resource.action ?? '',
        ...auditIndex(resource),
        // The record (rendered when read), or the resource of an older log.
        content,
      }));

/** The view's columns as its apply writes them ({@link arrayRows}); `seq` is numbered by the table. */
const VIEW_COLUMNS: readonly ApplyColumn[] = [
  { name: 'id', type: 'uuid' },
  { name: 'tenant_id', type: 'integer' },
  { name: 'recorded', type: 'timestamptz' },
  { name: 'action', type: 'text' },
  { name: 'outcome', type: 'text' },
  { name: 'code', type: 'text' },
  { name: 'agents', type: 'text[]' },
  { name: 'entities', type: 'text[]' },
  { name: 'patients', type: 'integer[]' },
  { name: 'content', type: 'json' },
];
const VIEW_NAMES = VIEW_COLUMNS.map((c) => c.name).join(', ');

export const auditEventsProjection: Projection = {
  name: 'audit-events',
  tables: ['rm_audit_events'],
  migrate: (sql) => migrateReadModel(sql, 'audit-events'),
  handles: (type) => isAuditEventType(type),
  // The AuditEvent is in the log either way: a stopped search view must not stop the service.
  refuseWritesWhenStopped: false,
  deferred: true,
  apply: async (events, tx) => {
    const rows = events.flatMap(rowsOf);
    if (rows.length === 0) return;
    // Parallel arrays (arrayRows): a third to a fifth of PostgreSQL's time for the same rows as
    // json_to_recordset, which parsed every row's arrays and content out of one JSON document
    // (~30–40 µs a row; docs/performance.md "Parallel arrays instead of `json_to_recordset`"). In the rows' order: `seq` numbers them as they come.
    const { select } = arrayRows(VIEW_COLUMNS, (i, type) => `$${i + 1}::${type}`);
    await tx.query(
      `INSERT INTO rm_audit_events (${VIEW_NAMES}) SELECT ${VIEW_NAMES} FROM (${select}) x ORDER BY x.n
       ON CONFLICT (id) DO NOTHING`,
      arrayValues(VIEW_COLUMNS, rows),
    );
  },
};
