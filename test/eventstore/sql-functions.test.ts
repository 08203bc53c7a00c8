/**
 * Each SQL function of the event store (src/eventstore/sql/001_event_store.sql), called directly on
 * both SQL stores (issue 34: "each SQL function has its own test"): what it writes, what it
 * answers, and the errors it raises, which src/eventstore/sql-event-store.ts maps to the port's.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import type { Sql } from '../../src/db/sql.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';

const METADATA = { tenantId: 1, actor: { type: 'system', id: 'test' } };

/** es_append's `requests`: one request of `stream` at `expected` with one event per id. */
const request = (stream: string, expected: string, ids: readonly string[]) => ({
  stream,
  expected,
  events: ids.map((id) => ({ id, type: 'Happened', metadata: METADATA })),
});

const parse = (value: unknown) => (typeof value === 'string' ? JSON.parse(value) : value);

/** The SQLSTATE of what `run` rejects with. */
const codeOf = async (run: Promise<unknown>): Promise<string | undefined> => {
  try {
    await run;
  } catch (error) {
    return (error as { code?: string }).code;
  }
  throw new Error('expected the statement to fail');
};

const rowsOf = (sql: Sql, stream: string) =>
  sql.query<{ revision: string; type: string; data: unknown }>(
    `SELECT revision::text AS revision, type, data FROM es_events WHERE stream_name = $1 ORDER BY revision`,
    [stream],
  );

for (const database of testDatabases) {
  describe(`event store SQL functions on ${database.name}`, () => {
    let db: OpenedDatabase;
    let sql: Sql;
    before(async () => {
      db = await database.open();
      sql = db.sql;
      await SqlEventStore.open(sql);
    });
    after(() => db.dispose());

    it('es_append writes a new stream, answers a replay without writing and refuses a wrong expected state', async () => {
      const id = uuid();
      const append = (expected: string) =>
        sql.query<{ reply: unknown }>(`SELECT es_append($1::jsonb, $2::json, NULL) AS reply`, [
          JSON.stringify([request('fn-a', expected, [id])]),
          JSON.stringify([{ n: 1 }]),
        ]);
      const [first] = await append('no_stream');
      const reply = parse(first!.reply) as { events: { stream: string; revision: string }[] };
      expect(reply.events).to.have.length(1);
      expect(reply.events[0]).to.include({ stream: 'fn-a', revision: '0' });
      // The same id again: the stored result, nothing written.
      await append('no_stream');
      expect(await rowsOf(sql, 'fn-a')).to.deep.equal([{ revision: '0', type: 'Happened', data: { n: 1 } }]);
      // Another event at a revision the stream is not at.
      const other = sql.query(`SELECT es_append($1::jsonb, $2::json, NULL)`, [
        JSON.stringify([request('fn-a', '5', [uuid()])]),
        '[null]',
      ]);
      expect(await codeOf(other)).to.equal('CBW01');
      expect(await rowsOf(sql, 'fn-a')).to.have.length(1);
    });

    it('es_append_inline appends as es_append, and refuses a call of a projection that is not live', async () => {
      const [row] = await sql.query<{ reply: unknown }>(
        `SELECT es_append_inline($1::jsonb, $2::json, NULL, '[]'::json) AS reply`,
        [JSON.stringify([request('fn-b', 'no_stream', [uuid()])]), '[{"b":1}]'],
      );
      expect((parse(row!.reply) as { events: unknown[] }).events).to.have.length(1);
      const refused = sql.query(`SELECT es_append_inline($1::jsonb, $2::json, NULL, $3::json)`, [
        JSON.stringify([request('fn-b2', 'no_stream', [uuid()])]),
        '[null]',
        JSON.stringify([{ projection: 'not-a-projection', function: 'lower', argument: [] }]),
      ]);
      expect(await codeOf(refused)).to.equal('CBI01');
      expect(await rowsOf(sql, 'fn-b2')).to.deep.equal([]);
    });

    it('es_append_batch appends several appends in one statement and answers each in order', async () => {
      const appends = ['fn-c1', 'fn-c2'].map((stream, i) => ({
        requests: [request(stream, 'no_stream', [uuid(), uuid()])],
        data: [
          { i, k: 0 },
          { i, k: 1 },
        ],
        known: null,
        calls: [],
      }));
      const [row] = await sql.query<{ replies: unknown }>(`SELECT es_append_batch($1::json) AS replies`, [
        JSON.stringify(appends),
      ]);
      const replies = parse(row!.replies) as { events: { stream: string; revision: string }[] }[];
      expect(replies.map((r) => r.events.map((e) => `${e.stream}@${e.revision}`))).to.deep.equal([
        ['fn-c1@0', 'fn-c1@1'],
        ['fn-c2@0', 'fn-c2@1'],
      ]);
      expect((await rowsOf(sql, 'fn-c2')).map((r) => r.data)).to.deep.equal([
        { i: 1, k: 0 },
        { i: 1, k: 1 },
      ]);
    });

    it('es_append_set writes new and existing streams set-based and refuses a stream not at its revision', async () => {
      const set = (streams: string[], expected: number[], ids: string[]) =>
        sql.query<{ reply: unknown }>(
          `SELECT es_append_set($1::text[], $2::bigint[], $3::bigint[], $4::uuid[], $5::text[], $6::bigint[],
             $7::text[], $8::jsonb, $9::json, NULL, '{}'::text[], '{}'::text[], '[]'::json) AS reply`,
          [
            streams,
            expected,
            expected.map((e) => e + 1),
            ids,
            streams,
            expected.map((e) => e + 1),
            streams.map(() => 'Happened'),
            JSON.stringify(streams.map(() => METADATA)),
            JSON.stringify(streams.map((s) => ({ s }))),
          ],
        );
      const ids = [uuid(), uuid()];
      const [row] = await set(['fn-d1', 'fn-d2'], [-1, -1], ids);
      const reply = parse(row!.reply) as { commit: string; ids: string[]; positions: string[] };
      expect(reply.ids).to.have.members(ids);
      expect(reply.positions).to.have.length(2);
      expect(reply.commit).to.match(/^\d+$/);
      // fn-d1 moves on from revision 0; fn-d2 is not at revision 3.
      await set(['fn-d1'], [0], [uuid()]);
      expect((await rowsOf(sql, 'fn-d1')).map((r) => r.revision)).to.deep.equal(['0', '1']);
      expect(await codeOf(set(['fn-d2'], [3], [uuid()]))).to.equal('CBC01');
      expect(await rowsOf(sql, 'fn-d2')).to.have.length(1);
      const [stream] = await sql.query<{ revision: string }>(
        `SELECT revision::text AS revision FROM es_streams WHERE stream_name = 'fn-d1'`,
      );
      expect(stream!.revision).to.equal('1');
    });
  });
}
