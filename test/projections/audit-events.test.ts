/**
 * The AuditEvent view's rows (src/projections/audit-events.ts): a batch of records goes in as
 * parallel arrays whose array columns are PostgreSQL array literals ({@link arrayLiteral}), so a
 * key holding the literal's own syntax — quotes, backslashes, commas, braces, the word NULL, an
 * empty string — must come back as it went in. On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { AUDIT_EVENTS_RECORDED, type AuditRecord } from '../../src/domain/audit/audit.js';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { auditEventsProjection, recordIndex } from '../../src/projections/audit-events.js';
import { arrayLiteral } from '../../src/projections/projection.js';
import { closeAfterEach, testDatabases } from '../support/databases.js';

const HOSTILE = ['a"b', 'back\\slash', 'x,y', '{braces}', 'NULL', '', ' spaced ', 'ünï"\\"cødé', '\\"'];

const record = (n: number, name: string, tenantId: number | null): AuditRecord => ({
  id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
  tenantId,
  interaction: 'read',
  action: 'R',
  recorded: `2026-03-01T10:00:0${n % 10}.000Z`,
  status: 200,
  agent: { kind: 'client', clientId: name },
  entities: [
    { reference: `Patient/${n}`, patientId: n },
    { reference: `Encounter/${n + 100}`, patientId: n },
  ],
});

const eventOf = (records: AuditRecord[], tenantId: number | null, n = 1): RecordedEvent => ({
  id: `10000000-0000-4000-8000-00000000000${n}`,
  type: AUDIT_EVENTS_RECORDED,
  data: { records },
  metadata: { tenantId } as RecordedEvent['metadata'],
  streamName: `audit-${n}`,
  revision: 0n,
  position: { commit: BigInt(n), prepare: BigInt(n) },
});

describe('arrayLiteral', () => {
  it('quotes strings, escapes quotes and backslashes, writes integers bare', () => {
    expect(arrayLiteral([])).to.equal('{}');
    expect(arrayLiteral([1, 22])).to.equal('{1,22}');
    expect(arrayLiteral(['a"b', 'c\\d', 'e,f'])).to.equal('{"a\\"b","c\\\\d","e,f"}');
  });
});

for (const db of testDatabases) {
  describe(`AuditEvent view rows on ${db.name}`, function () {
    this.timeout(60_000);
    const cleanups = closeAfterEach();

    it('stores every key as written, whatever characters it holds, in batch order, once', async () => {
      const opened = await db.open();
      cleanups.push(() => opened.dispose());
      const { sql } = opened;
      await auditEventsProjection.migrate(sql);
      const records = HOSTILE.map((name, i) => record(i + 1, name, i % 2 ? null : 7));
      // A refusal before authentication has no tenant: its row's tenant is NULL.
      const anonymous = { ...record(99, 'anonymous', null), agent: { kind: 'anonymous' as const } };
      const events = [eventOf(records, 7), eventOf([anonymous], null, 2)];
      await sql.transaction((tx) => auditEventsProjection.apply(events, tx, 'catch-up'));
      // Applied again (a replayed batch): nothing changes.
      await sql.transaction((tx) => auditEventsProjection.apply(events, tx, 'catch-up'));
      const rows = await sql.query<{
        id: string;
        tenant_id: number | null;
        agents: string[];
        entities: string[];
        patients: number[];
        content: unknown;
        action: string;
        code: string;
        outcome: string;
      }>(
        `SELECT id::text, tenant_id, agents, entities, patients, content, action, code, outcome
           FROM rm_audit_events ORDER BY seq`,
      );
      expect(rows.map((r) => r.id)).to.deep.equal([...records, anonymous].map((r) => r.id));
      const last = rows.pop()!;
      expect([last.tenant_id, last.agents, last.entities]).to.deep.equal([
        null,
        [],
        ['Patient/99', 'Encounter/199'],
      ]);
      for (const [i, row] of rows.entries()) {
        const index = recordIndex(records[i]!);
        expect(row.agents, `agents of ${JSON.stringify(HOSTILE[i])}`).to.deep.equal(index.agents);
        // The bare client id is one of the keys, exactly as written ('' and 'NULL' included).
        expect(row.agents).to.include(HOSTILE[i]);
        expect(row.entities).to.deep.equal(index.entities);
        expect(row.patients).to.deep.equal(index.patients);
        // The view's tenant is the event's (metadata), as before.
        expect(row.tenant_id).to.equal(7);
        expect(row.content).to.deep.equal(records[i]);
        expect([row.action, row.code, row.outcome]).to.deep.equal(['R', 'read', index.outcome]);
      }
    });
  });
}
