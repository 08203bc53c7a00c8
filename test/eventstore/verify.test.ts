/**
 * `verifyLog` walks the leaves and the events in numeric log order (issue 33): transaction ids and
 * positions that cross a power of ten (9 → 10, 99 → 100, 999 → 1000…) were ordered as text, "100"
 * before "99", and a clean log verified as "inserted at …". On both SQL stores.
 */
import { expect } from 'chai';
import pino from 'pino';
import { v4 as uuid } from 'uuid';
import type { Sql } from '../../src/db/sql.js';
import type { NewEvent } from '../../src/eventstore/port.js';
import { Sealer } from '../../src/eventstore/sealer.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { logHead, verifyLog } from '../../src/eventstore/verify.js';
import { closeAfterEach, openStore, testDatabases } from '../support/databases.js';

const metadata = (n: number): NewEvent['metadata'] => ({
  tenantId: 1,
  actor: { type: 'client', id: 'ehr-backend' },
  correlationId: uuid(),
  causationId: null,
  requestId: null,
  recordedAt: new Date(Date.UTC(2026, 2, 1, 10, 0, 0, n)).toISOString(),
});

const note = (n: number): NewEvent => ({
  id: uuid(),
  type: 'NoteRecorded',
  data: { n },
  metadata: metadata(n),
});

/**
 * Transaction ids that cross 9 → 10, 99 → 100 and 999 → 1000, positions that cross every power of
 * ten up to 10^6 (and the seal batches' edges with them); a later transaction may hold an earlier
 * position (it took its sequence number first), as under concurrent appends.
 */
const CRAFTED: readonly { xid: number; positions: readonly number[] }[] = [
  { xid: 8, positions: [1, 2] },
  { xid: 9, positions: [8, 9] },
  { xid: 10, positions: [10, 11] },
  { xid: 99, positions: [98, 99, 100] },
  { xid: 100, positions: [101, 999] },
  { xid: 999, positions: [1000, 1001] },
  { xid: 1000, positions: [9999, 10000, 99999, 100000, 999999, 1000000] },
  { xid: 1001, positions: [500] },
];

/**
 * Writes the crafted events straight into `es_events`, as a log of that shape would hold them,
 * once the database has given out transaction ids past them (a reader of `$all` shows only
 * transactions below the oldest one running).
 */
const craftLog = async (sql: Sql): Promise<void> => {
  for (;;) {
    const [{ xid }] = (await sql.query<{ xid: string }>(`SELECT pg_current_xact_id()::text AS xid`)) as [
      { xid: string },
    ];
    if (Number(xid) > 1010) break;
  }
  let n = 0;
  for (const { xid, positions } of CRAFTED)
    for (const position of positions) {
      const stream = `note-${xid}`;
      await sql.query(
        `INSERT INTO es_events (position, transaction_id, event_id, stream_name, revision, type, data, metadata)
         VALUES ($1, $2::text::xid8, $3, $4, (SELECT count(*) FROM es_events WHERE stream_name = $4), 'NoteRecorded', $5::json, $6::jsonb)`,
        [position, String(xid), uuid(), stream, JSON.stringify({ n }), JSON.stringify(metadata(n))],
      );
      n++;
    }
};

const EVENTS = CRAFTED.reduce((sum, t) => sum + t.positions.length, 0);

for (const database of testDatabases) {
  describe(`verify in numeric log order on ${database.name}`, function () {
    this.timeout(120_000);
    const cleanups = closeAfterEach();
    const silent = pino({ level: 'silent' });

    it('verifies a log whose transaction ids and positions cross powers of ten, sealed in batches of 3', async () => {
      const { opened, store } = await openStore(database, cleanups);
      const sealer = new Sealer(store, opened.sql, silent, { batch: 3 });
      await sealer.migrate();
      await craftLog(opened.sql);
      expect(await sealer.sealAll()).to.equal(EVENTS);
      const result = await verifyLog(store, opened.sql);
      expect(result).to.deep.include({ ok: true, events: EVENTS, sealed: EVENTS, unsealed: 0 });
      expect(result.headPosition).to.equal('1001/500');
      const head = await logHead(store, new Date());
      expect(head).to.include({ events: EVENTS, position: '1001/500' });
    });

    it('still names the first altered, removed and inserted event across those powers of ten', async () => {
      const { opened, store } = await openStore(database, cleanups);
      const sealer = new Sealer(store, opened.sql, silent, { batch: 4 });
      await sealer.migrate();
      await craftLog(opened.sql);
      await sealer.sealAll();
      const problem = async () => (await verifyLog(store, opened.sql)).problem;

      await opened.sql.query(`UPDATE es_events SET data = '{"n":-1}'::json WHERE position = 1000`);
      expect(await problem()).to.deep.include({ kind: 'altered', position: '999/1000' });
      await opened.sql.query(`DELETE FROM es_events WHERE position = 100`);
      expect(await problem()).to.deep.include({ kind: 'removed', position: '99/100' });
      await opened.sql.query(`DELETE FROM es_seal_leaves WHERE prepare_pos = 9`);
      expect(await problem()).to.deep.include({ kind: 'inserted', position: '9/9' });
    });

    it('verifies one append of 1,000 events after 300 appends of one (positions 9 → 10 … 999 → 1000)', async () => {
      const { opened, store } = await openStore(database, cleanups);
      const sealer = new Sealer(store, opened.sql, silent, { batch: 128 });
      await sealer.migrate();
      // 300 transactions: on PGlite (transaction ids from ~750) they cross 999 → 1000 too.
      for (let i = 0; i < 300; i++) await store.append(`single-${i}`, [note(i)], 'no_stream');
      const big = Array.from({ length: 1000 }, (_, i) => note(300 + i));
      await store.append('bulk', big, 'no_stream');
      const all = await SqlEventStore.readAllOn(opened.sql, { maxCount: 2000 }, false);
      expect(all).to.have.length(1300);
      // Seal everything (the $all reader waits for transactions of other tests to end).
      for (let i = 0; i < 100 && (await sealer.sealAll()) >= 0; i++) {
        const [{ n }] = (await opened.sql.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM es_seal_leaves`,
        )) as [{ n: string }];
        if (Number(n) === 1300) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const result = await verifyLog(store, opened.sql);
      expect(result).to.deep.include({ ok: true, events: 1300, sealed: 1300, unsealed: 0 });
      const head = await logHead(store, new Date());
      expect(head.events).to.equal(1300);
      expect(head.position).to.equal(`${all.at(-1)!.position.commit}/${all.at(-1)!.position.prepare}`);
    });
  });
}
