/**
 * Each SQL function of the event store (src/eventstore/sql/*.sql), called directly on both SQL
 * stores (issue 34: "each SQL function has its own test"). Since version 2 there is one: es_append
 * (002_one_append.sql; 004_plans_and_new_streams.sql adds generic plans and a one-statement case for one new stream), which answers each append of a call on its own — written, a replay, a
 * wrong expected version, an id conflict, an unknown live projection, a projection not live —
 * and writes nothing of an append it refuses.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import type { Sql } from '../../src/db/sql.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';

const METADATA = { tenantId: 1, actor: { type: 'system', id: 'test' } };

/** One stream request of a call: `expected` -1 no stream, -2 any, -3 exists, else a revision. */
interface Request {
  readonly append: number;
  readonly stream: string;
  readonly expected: number;
  readonly ids: readonly string[];
}

interface Call {
  readonly append: number;
  readonly projection: string;
  readonly function: string;
  readonly rows: readonly unknown[];
}

interface Reply {
  commit: string | null;
  status: string[];
  detail: (string | null)[];
  outcome: string[];
  revision: string[];
  commits: (string | null)[];
  positions: (string | null)[];
  event_positions: (string | null)[];
  projections: Record<string, string> | null;
}

/** Calls es_append with `requests` (each event's data `{stream, k}`), `known` and `calls` (null: none). */
const esAppend = async (
  sql: Sql,
  requests: readonly Request[],
  calls: readonly Call[] | null = [],
  known: readonly string[] | null = null,
): Promise<Reply> => {
  const events = requests.flatMap((r) => r.ids.map((id, k) => ({ id, data: { stream: r.stream, k } })));
  const [row] = await sql.query<{ reply: unknown }>(
    `SELECT es_append($1::integer[], $2::text[], $3::bigint[], $4::integer[], $5::uuid[], $6::text[],
       $7::jsonb, $8::json, $9::text[], $10::integer[], $11::text[], $12::text[], $13::json) AS reply`,
    [
      requests.map((r) => r.append),
      requests.map((r) => r.stream),
      requests.map((r) => r.expected),
      requests.map((r) => r.ids.length),
      events.map((e) => e.id),
      events.map(() => 'Happened'),
      JSON.stringify(events.map(() => METADATA)),
      JSON.stringify(events.map((e) => e.data)),
      known,
      calls ? calls.map((c) => c.append) : null,
      calls ? calls.map((c) => c.projection) : null,
      calls ? calls.map((c) => c.function) : null,
      calls ? JSON.stringify(calls.map((c) => c.rows)) : null,
    ],
  );
  return (typeof row!.reply === 'string' ? JSON.parse(row!.reply) : row!.reply) as Reply;
};

const rowsOf = (sql: Sql, stream: string) =>
  sql.query<{ revision: string; data: unknown }>(
    `SELECT revision::text AS revision, data FROM es_events WHERE stream_name = $1 ORDER BY revision`,
    [stream],
  );

const streamRow = async (sql: Sql, stream: string) =>
  (
    await sql.query<{ revision: string }>(
      `SELECT revision::text AS revision FROM es_streams WHERE stream_name = $1`,
      [stream],
    )
  )[0]?.revision;

for (const database of testDatabases) {
  describe(`event store SQL function es_append on ${database.name}`, () => {
    let db: OpenedDatabase;
    let sql: Sql;
    before(async () => {
      db = await database.open();
      sql = db.sql;
      await SqlEventStore.open(sql);
      // An inline read model's function: records the rows it is called with.
      await sql.exec(`CREATE TABLE fn_rows (row_value json);
        CREATE FUNCTION fn_apply(rows json) RETURNS void LANGUAGE sql AS
          $$ INSERT INTO fn_rows SELECT r FROM json_array_elements(rows) r $$;`);
    });
    after(() => db.dispose());

    it('writes new and existing streams, each event at its revision, and answers their positions', async () => {
      const [a, b] = [uuid(), uuid()];
      const first = await esAppend(sql, [{ append: 1, stream: 'fn-a', expected: -1, ids: [a, b] }]);
      expect(first.status).to.deep.equal(['ok']);
      expect(first.outcome).to.deep.equal(['write']);
      expect(first.revision).to.deep.equal(['1']);
      expect(first.event_positions).to.have.length(2);
      expect(first.positions[0]).to.equal(first.event_positions[1]);
      expect(first.commits[0]).to.equal(first.commit);
      const second = await esAppend(sql, [{ append: 1, stream: 'fn-a', expected: 1, ids: [uuid()] }]);
      expect(second.revision).to.deep.equal(['2']);
      expect((await rowsOf(sql, 'fn-a')).map((r) => r.revision)).to.deep.equal(['0', '1', '2']);
      expect(await streamRow(sql, 'fn-a')).to.equal('2');
      // A request without events checks its stream and answers its last event.
      const check = await esAppend(sql, [{ append: 1, stream: 'fn-a', expected: -3, ids: [] }]);
      expect(check.outcome).to.deep.equal(['check']);
      expect(check.revision).to.deep.equal(['2']);
      expect(check.positions[0]).to.equal(second.positions[0]);
    });

    it('writes one new stream without calls in one statement, answering as the general path does', async () => {
      // 004_plans_and_new_streams.sql: one request, expected no stream, no calls (an audit batch).
      const fast = await esAppend(sql, [{ append: 1, stream: 'fn-n1', expected: -1, ids: [uuid(), uuid()] }]);
      // The same append through the general path (expected 'any' is not the one-statement case).
      const general = await esAppend(sql, [
        { append: 1, stream: 'fn-n2', expected: -2, ids: [uuid(), uuid()] },
      ]);
      for (const reply of [fast, general]) {
        expect([reply.status, reply.detail, reply.outcome, reply.revision]).to.deep.equal([
          ['ok'],
          [null],
          ['write'],
          ['1'],
        ]);
        expect(reply.commits).to.deep.equal([reply.commit]);
        expect(reply.event_positions).to.have.length(2);
        expect(Number(reply.event_positions[1])).to.be.greaterThan(Number(reply.event_positions[0]));
        expect(reply.positions).to.deep.equal([reply.event_positions[1]]);
        expect(reply.projections).to.equal(null);
      }
      expect(Number(general.event_positions[0])).to.be.greaterThan(Number(fast.event_positions[1]));
      expect(await rowsOf(sql, 'fn-n1')).to.deep.equal([
        { revision: '0', data: { stream: 'fn-n1', k: 0 } },
        { revision: '1', data: { stream: 'fn-n1', k: 1 } },
      ]);
      expect(await streamRow(sql, 'fn-n1')).to.equal('1');
      // A name already held: nothing written by the one statement; the general path answers.
      const taken = await esAppend(sql, [{ append: 1, stream: 'fn-n1', expected: -1, ids: [uuid()] }]);
      expect([taken.status, taken.detail, taken.revision]).to.deep.equal([['wrong'], ['1'], ['1']]);
      expect(await rowsOf(sql, 'fn-n1')).to.have.length(2);
      // Its settings: one plan per statement for the connection's life, looked up by index.
      const [settings] = await sql.query<{ config: string[] }>(
        `SELECT proconfig AS config FROM pg_proc WHERE oid = 'es_append'::regproc`,
      );
      expect(settings!.config).to.include.members([
        'jit=off',
        'enable_seqscan=off',
        'plan_cache_mode=force_generic_plan',
      ]);
    });

    it('answers a replay with the stored result and a conflict or a wrong expected state without writing', async () => {
      const id = uuid();
      const first = await esAppend(sql, [{ append: 1, stream: 'fn-b', expected: -1, ids: [id] }]);
      const again = await esAppend(sql, [{ append: 1, stream: 'fn-b', expected: -1, ids: [id] }]);
      expect(again.status).to.deep.equal(['ok']);
      expect(again.outcome).to.deep.equal(['replay']);
      expect([again.revision, again.commits, again.positions]).to.deep.equal([
        first.revision,
        first.commits,
        first.positions,
      ]);
      const conflict = await esAppend(sql, [{ append: 1, stream: 'fn-b2', expected: -1, ids: [id] }]);
      expect([conflict.status, conflict.detail]).to.deep.equal([['conflict'], [id]]);
      expect(await streamRow(sql, 'fn-b2')).to.equal(undefined);
      const wrong = await esAppend(sql, [
        { append: 1, stream: 'fn-b3', expected: -1, ids: [uuid()] },
        { append: 1, stream: 'fn-b', expected: 5, ids: [uuid()] },
      ]);
      // The refused request (the second of the call), and the stream's actual revision.
      expect([wrong.status, wrong.detail, wrong.revision[1]]).to.deep.equal([['wrong'], ['2'], '0']);
      expect(await rowsOf(sql, 'fn-b')).to.have.length(1);
      expect(await rowsOf(sql, 'fn-b3')).to.deep.equal([]);
      expect(await streamRow(sql, 'fn-b3')).to.equal(undefined);
    });

    it('answers each append of a batch on its own: the refused ones write nothing, the others commit', async () => {
      await esAppend(sql, [{ append: 1, stream: 'fn-c0', expected: -1, ids: [uuid()] }]);
      const reply = await esAppend(sql, [
        { append: 1, stream: 'fn-c1', expected: -1, ids: [uuid(), uuid()] },
        { append: 2, stream: 'fn-c0', expected: -1, ids: [uuid()] },
        { append: 2, stream: 'fn-c2', expected: -1, ids: [uuid()] },
        { append: 3, stream: 'fn-c3', expected: -2, ids: [uuid()] },
      ]);
      expect(reply.status).to.deep.equal(['ok', 'wrong', 'ok']);
      expect(reply.outcome).to.deep.equal(['write', 'wrong', 'write', 'write']);
      expect((await rowsOf(sql, 'fn-c1')).map((r) => r.data)).to.deep.equal([
        { stream: 'fn-c1', k: 0 },
        { stream: 'fn-c1', k: 1 },
      ]);
      expect(await rowsOf(sql, 'fn-c0')).to.have.length(1);
      expect(await rowsOf(sql, 'fn-c2')).to.deep.equal([]);
      expect(await streamRow(sql, 'fn-c2')).to.equal(undefined);
      expect(await rowsOf(sql, 'fn-c3')).to.have.length(1);
      // The written events' positions in request order; none for the refused append's.
      expect(reply.event_positions[3]).to.equal(null);
      expect(Number(reply.event_positions[4])).to.be.greaterThan(Number(reply.event_positions[1]));
    });

    it('runs the calls of the appends that wrote, merged per function, and refuses one whose projection is not live', async () => {
      await sql.query(
        `INSERT INTO projection_state (name, status) VALUES ('fn-live', 'live'), ('fn-building', 'building')`,
      );
      const reply = await esAppend(
        sql,
        [
          { append: 1, stream: 'fn-d1', expected: -1, ids: [uuid()] },
          { append: 2, stream: 'fn-d2', expected: -1, ids: [uuid()] },
          { append: 3, stream: 'fn-d3', expected: -1, ids: [uuid()] },
        ],
        [
          { append: 1, projection: 'fn-live', function: 'fn_apply', rows: [{ d: 1 }] },
          { append: 2, projection: 'fn-building', function: 'fn_apply', rows: [{ d: 2 }] },
          { append: 3, projection: 'fn-live', function: 'fn_apply', rows: [{ d: 3 }, { d: 4 }] },
        ],
      );
      expect([reply.status, reply.detail]).to.deep.equal([
        ['ok', 'not_live', 'ok'],
        [null, 'fn-building', null],
      ]);
      expect(await rowsOf(sql, 'fn-d2')).to.deep.equal([]);
      const rows = await sql.query<{ row_value: unknown }>(`SELECT row_value FROM fn_rows`);
      expect(rows.map((r) => r.row_value)).to.deep.equal([{ d: 1 }, { d: 3 }, { d: 4 }]);
      // Without calls (NULL) the reply carries every projection's status.
      const plain = await esAppend(sql, [{ append: 1, stream: 'fn-d9', expected: -1, ids: [uuid()] }], null);
      expect(plain.projections).to.include({ 'fn-live': 'live', 'fn-building': 'building' });
    });

    it('refuses every append while a live projection is unknown to the caller, writing nothing', async () => {
      await sql.query(`INSERT INTO projection_state (name, status) VALUES ('fn-newer', 'live')`);
      try {
        const reply = await esAppend(
          sql,
          [
            { append: 1, stream: 'fn-e1', expected: -1, ids: [uuid()] },
            { append: 2, stream: 'fn-e2', expected: -1, ids: [uuid()] },
          ],
          [],
          ['fn-live'],
        );
        expect([reply.status, reply.detail]).to.deep.equal([
          ['unknown', 'unknown'],
          ['fn-newer', 'fn-newer'],
        ]);
        expect(await streamRow(sql, 'fn-e1')).to.equal(undefined);
        // One new stream without calls (the one-statement case) is refused the same way.
        const one = await esAppend(
          sql,
          [{ append: 1, stream: 'fn-e3', expected: -1, ids: [uuid()] }],
          [],
          ['fn-live'],
        );
        expect([one.status, one.detail]).to.deep.equal([['unknown'], ['fn-newer']]);
        expect(await streamRow(sql, 'fn-e3')).to.equal(undefined);
      } finally {
        await sql.query(`DELETE FROM projection_state WHERE name LIKE 'fn-%'`);
      }
    });

    it('raises and writes nothing when events, types, metadata and data differ in number, or a stream is there twice', async () => {
      const codeOf = (run: Promise<unknown>) =>
        run.then(
          () => 'none',
          (e: { code?: string }) => e.code,
        );
      const short = sql.query(
        `SELECT es_append('{1}', '{fn-f1}', '{-1}', '{2}', $1::uuid[], '{Happened,Happened}', '[{},{}]', '[{"n":1}]',
           NULL, NULL, NULL, NULL, NULL)`,
        [[uuid(), uuid()]],
      );
      expect(await codeOf(short)).to.equal('22023');
      const twice = sql.query(
        `SELECT es_append('{1,2}', '{fn-f2,fn-f2}', '{-1,-1}', '{1,1}', $1::uuid[], '{Happened,Happened}',
           '[{},{}]', '[1,2]', NULL, NULL, NULL, NULL, NULL)`,
        [[uuid(), uuid()]],
      );
      expect(await codeOf(twice)).to.equal('22023');
      // The same check before the one-statement case (one new stream, no calls).
      const fewer = sql.query(
        `SELECT es_append('{1}', '{fn-f3}', '{-1}', '{2}', $1::uuid[], '{Happened,Happened}', '[{},{}]', '[{"n":1}]',
           NULL, '{}', '{}', '{}', '[]')`,
        [[uuid(), uuid()]],
      );
      expect(await codeOf(fewer)).to.equal('22023');
      expect(await streamRow(sql, 'fn-f3')).to.equal(undefined);
      expect(await streamRow(sql, 'fn-f1')).to.equal(undefined);
      expect(await streamRow(sql, 'fn-f2')).to.equal(undefined);
    });
  });
}

// 003_append_by_index.sql: a connection's cached plans, made while the log was small, must not
// scan the whole log on every later append (appends slowed from 3,500 to 550 events/s as the
// bench log grew). One connection (its plans cached on an empty log), a log grown by 20,000
// events, then 20 appends: the table's sequential reads stay far below one scan of it.
describe('event store SQL function es_append on postgres: lookups by index on a grown log', () => {
  const postgres = testDatabases.find((d) => d.name === 'postgres');
  it('reads es_events by index, not by scanning it, whatever plans its connection cached', async function () {
    if (!postgres) {
      console.log('    (skipped: the PostgreSQL test database is not configured)');
      this.skip();
    }
    const db = await postgres!.open();
    try {
      await SqlEventStore.open(db.sql);
      const one = await db.reopen(1);
      // Both paths: one new stream without calls (one statement), and two streams (the general path).
      const append = (i: number) =>
        esAppend(
          one,
          i % 2
            ? [{ append: 1, stream: `grown-${i}`, expected: -1, ids: [uuid()] }]
            : [
                { append: 1, stream: `grown-${i}`, expected: -1, ids: [uuid()] },
                { append: 1, stream: `grown-${i}-b`, expected: -2, ids: [uuid()] },
              ],
        );
      for (let i = 0; i < 10; i++) expect((await append(i)).status).to.deep.equal(['ok']);
      await db.sql.exec(`INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
        SELECT gen_random_uuid(), 'bulk-' || g, 0, 'Happened', '{}', '{}' FROM generate_series(1, 20000) g`);
      // No ANALYZE: it would make the connection plan again (autovacuum's comes much later).
      for (let i = 10; i < 30; i++) expect((await append(i)).status).to.deep.equal(['ok']);
      // Its statistics, to shared memory as soon as it is idle (PostgreSQL 15), then read.
      await one.query(`SELECT pg_stat_force_next_flush()`);
      await new Promise((r) => setTimeout(r, 300));
      const [row] = await db.sql.query<{ n: string }>(
        `SELECT seq_tup_read::text AS n FROM pg_stat_user_tables WHERE relid = 'es_events'::regclass`,
      );
      await one.close();
      const read = Number(row!.n);
      expect(read).to.be.below(20_000);
    } finally {
      await db.dispose();
    }
  });
});
