/**
 * Projection spec of `rm_audit_events` (src/projections/audit-events.ts; docs/architecture.md
 * "Projections", deferred): given audit batches → then rows, by the deferred follower's pass, by
 * catch-up and by rebuild, on PGlite and PostgreSQL. `seq` numbers rows in insertion order, which
 * differs between a live view and one rebuilt: compared by order, not by value.
 */
import { AUDIT_EVENTS_RECORDED, type AuditRecord, auditStream } from '../../../src/domain/audit/audit.js';
import { auditEventsProjection } from '../../../src/projections/audit-events.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const record = (n: number, patientId: number): AuditRecord => ({
  id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
  tenantId: 1,
  interaction: 'read',
  action: 'R',
  recorded: `2026-03-01T10:00:0${n % 10}.000Z`,
  status: n % 2 ? 200 : 403,
  agent: { kind: 'client', clientId: `client-${n}` },
  entities: [{ reference: `Patient/${patientId}`, patientId }],
});
const batch = (batchId: string, records: AuditRecord[]) =>
  specEvent(auditStream(batchId), AUDIT_EVENTS_RECORDED, { records });

const rowsOf = (from: number, to: number) =>
  `SELECT id::text, tenant_id, recorded, action, outcome, code, agents, entities, patients, content->>'id' AS content_id
     FROM rm_audit_events
    WHERE id BETWEEN '00000000-0000-4000-8000-${String(from).padStart(12, '0')}'
                 AND '00000000-0000-4000-8000-${String(to).padStart(12, '0')}'
    ORDER BY seq`;

const row = (n: number, patientId: number) => ({
  id: record(n, patientId).id,
  tenant_id: 1,
  recorded: record(n, patientId).recorded,
  action: 'R',
  outcome: n % 2 ? '0' : '4',
  code: 'read',
  agents: [`https://casebook.dev/fhir/NamingSystem/api-client|client-${n}`, `client-${n}`],
  entities: [`Patient/${patientId}`],
  patients: [patientId],
  content_id: record(n, patientId).id,
});

for (const db of testDatabases)
  describe(`projection spec: audit-events on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [auditEventsProjection]);

    it('a batch of records is one row each, in the batch order', () =>
      spec
        .given(batch('b-1', [record(1, 41), record(2, 42)]))
        .thenRows(rowsOf(1, 2), [row(1, 41), row(2, 42)]));

    it('a record delivered twice (a retried batch) is one row', () =>
      spec
        .given(batch('b-2', [record(3, 43)]))
        .when(batch('b-3', [record(3, 43), record(4, 44)]))
        .thenRows(rowsOf(3, 4), [row(3, 43), row(4, 44)]));
  });
