/**
 * Given events → then rows, for the read models (issue 34 "One projection contract"; the shape of
 * Emmett's `postgresProjectionSpec`; docs/architecture.md "Projections"):
 *
 *   const spec = projectionSpec(db);                       // in a describe: one pair of stores
 *   it('…', () => spec.given(created).when(renamed).thenRows(`SELECT … WHERE id = 7`, [row]));
 *
 * `thenRows` writes the events through the runner's real modes and asserts the same rows after
 * each, so a read model cannot answer differently depending on how it was built:
 *
 * 1. inline: appended to a store whose runner applies them in the append (the inline hook; the
 *    deferred AuditEvent view by the deferred follower's catch-up pass, `catchUpDeferred`);
 * 2. catch-up: appended to a second store whose runner does not hook its appends, then built from
 *    the log by `catchUp` in pages of two events (so pages, the pipelined catch-up on PostgreSQL and
 *    the final pages under the append lock all run), from the checkpoint the previous spec left;
 * 3. rebuild: the first store's read models rebuilt beside the live ones and swapped in
 *    (`rebuild`), from the start of the log.
 *
 * The stores are shared by every spec of the process (the log grows): each spec uses ids of its
 * own and selects only its rows. Rows are compared as JSON (`to_jsonb` of each row), instants
 * normalised to ISO 8601 in UTC.
 */
import { expect } from 'chai';
import { pino } from 'pino';
import { migrateSequences } from '../../src/db/sequences.js';
import type { Sql } from '../../src/db/sql.js';
import type { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { allProjections } from '../../src/projections/index.js';
import type { Projection } from '../../src/projections/projection.js';
import { ProjectionRunner } from '../../src/projections/runner/index.js';
import { type Cleanups, openStore, type TestDatabase } from './databases.js';
import { testEvent } from './events.js';

/** An event as a spec gives it: its stream, type and data (recorded at `recordedAt`, default 2026-03-01T10:00Z). */
export interface SpecEvent {
  readonly stream: string;
  readonly type: string;
  readonly data: unknown;
  readonly recordedAt?: string;
}

/** A {@link SpecEvent}. */
export const specEvent = (stream: string, type: string, data: unknown, recordedAt?: string): SpecEvent => ({
  stream,
  type,
  data,
  ...(recordedAt ? { recordedAt } : {}),
});

export interface Then {
  /**
   * Appends the given and when events (in that order, each to its stream) through every mode and
   * asserts that `query` (a SELECT, ordered) returns `expected` after each.
   * @param expected rows as `to_jsonb` gives them (instants as ISO 8601 UTC, `…T10:00:00.000Z`).
   */
  thenRows(query: string, expected: readonly Record<string, unknown>[]): Promise<void>;
}

export interface Given extends Then {
  when(...events: SpecEvent[]): Then;
}

export interface ProjectionSpec {
  given(...events: SpecEvent[]): Given;
}

const logger = pino({ level: 'silent' });
const INSTANT = /^\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d(?::\d\d)?)$/;

/** `value` with every instant written as `toISOString` writes it. */
const normalise = (value: unknown): unknown => {
  if (typeof value === 'string') return INSTANT.test(value) ? new Date(value).toISOString() : value;
  if (Array.isArray(value)) return value.map(normalise);
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalise(v)]));
  return value;
};

/** The rows of `query` as normalised JSON values. */
export const rowsOf = async (sql: Sql, query: string): Promise<Record<string, unknown>[]> =>
  (await sql.query<{ r: string }>(`SELECT to_jsonb(q)::text AS r FROM (${query}) q`)).map(
    (row) => normalise(JSON.parse(row.r)) as Record<string, unknown>,
  );

interface Stores {
  live: { sql: Sql; store: SqlEventStore; runner: ProjectionRunner };
  cold: { sql: Sql; store: SqlEventStore; runner: ProjectionRunner };
}

/** The stores of each database, shared by every spec of the process; closed after the last. */
const shared = new Map<string, Promise<Stores>>();
const cleanups: Cleanups = [];
// A root hook (this module is loaded with the spec files): closes the stores after the whole run.
after(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
  shared.clear();
});

const openStores = async (db: TestDatabase): Promise<Stores> => {
  const open = async (hook: boolean) => {
    const { opened, store } = await openStore(db, cleanups);
    await migrateSequences(opened.sql);
    const runner = new ProjectionRunner(store, opened.sql, allProjections, logger, {
      ...(hook ? {} : { appendHook: false, pageSize: 2 }),
    });
    await runner.migrate();
    await runner.catchUp();
    cleanups.push(() => runner.stop());
    return { sql: opened.sql, store, runner };
  };
  return { live: await open(true), cold: await open(false) };
};

/**
 * The spec of read models on `db`: registers, in the calling describe, a `before` that opens (once
 * per process and database, shared by every spec file) two stores, one with every projection
 * applied inline, one built by catch-up; they are closed after the whole run.
 * @param projections the read models under test: the ones rebuilt after each spec (every
 *   projection runs inline, as in a server).
 */
export const projectionSpec = (db: TestDatabase, projections: readonly Projection[]): ProjectionSpec => {
  let stores: Stores | undefined;
  before(async function () {
    // The first PGlite of a process makes the template cluster (src/db/pglite-template.ts).
    this.timeout(300_000);
    let opening = shared.get(db.name);
    if (!opening) {
      opening = openStores(db);
      shared.set(db.name, opening);
    }
    stores = await opening;
  });

  const append = async (store: SqlEventStore, events: readonly SpecEvent[]) => {
    for (const e of events)
      await store.append(
        e.stream,
        [testEvent(e.type, e.data, e.recordedAt ? { recordedAt: e.recordedAt } : {})],
        'any',
      );
  };

  const thenRows = async (events: readonly SpecEvent[], query: string, expected: readonly object[]) => {
    const { live, cold } = stores!;
    const want = normalise(expected);
    // 1. inline, in each append (the deferred views by the follower's pass).
    await append(live.store, events);
    await live.runner.catchUpDeferred();
    expect(await rowsOf(live.sql, query), 'inline').to.deep.equal(want);
    // 2. catch-up from the log, in pages, from the last spec's checkpoint.
    await append(cold.store, events);
    await cold.sql.query(`UPDATE projection_state SET status = 'building'`);
    await cold.runner.catchUp();
    const states = await cold.runner.states();
    expect(
      states.filter((s) => s.status !== 'live').map((s) => s.name),
      'catch-up states',
    ).to.deep.equal([]);
    expect(await rowsOf(cold.sql, query), 'catch-up').to.deep.equal(want);
    // 3. rebuild beside the live read models, from the start of the log.
    const result = await live.runner.rebuild(
      undefined,
      projections.map((p) => p.name),
    );
    expect([...result.stopped.keys()], 'rebuild stopped').to.deep.equal([]);
    expect(await rowsOf(live.sql, query), 'rebuild').to.deep.equal(want);
  };

  return {
    given: (...given) => ({
      thenRows: (query, expected) => thenRows(given, query, expected),
      when: (...when) => ({
        thenRows: (query, expected) => thenRows([...given, ...when], query, expected),
      }),
    }),
  };
};
