/**
 * Benchmarks (not tests): `npm run bench`. Prints numbers next to targets and exits 0; with
 * `BENCH_STRICT=1` it exits 1 when a result misses its target by a lot (see STRICT_FACTOR).
 *
 * Measured on in-memory PGlite and on a real PostgreSQL server (BENCH_DATABASE_URL, else
 * TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test; a fresh schema, dropped after):
 *   (a) sequential appends: single-event appends to distinct streams — events/s, p50/p99 latency
 *   (b) concurrent appends (postgres only): WORKERS workers × PER_WORKER appends
 *   (c) readAll throughput over the whole log, in pages of READ_PAGE
 *   (d) projection catch-up: ProjectionRunner with every projection over the log — events/s
 *   (e) process RSS before/after, MiB
 * See bench/README.md for what each number means and the figures measured so far.
 */
import { randomBytes } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pino from 'pino';
import { v4 as uuidv4 } from 'uuid';
import { migrateSequences } from '../src/commands/context.js';
import { PgliteSql, PostgresSql, type Sql } from '../src/db/sql.js';
import { type SessionCreatedData, sessionStream } from '../src/domain/session/session.js';
import { openEventStore } from '../src/eventstore/index.js';
import type { EventStore, NewEvent, Position } from '../src/eventstore/port.js';
import { allProjections } from '../src/projections/index.js';
import { ProjectionRunner } from '../src/projections/runner/index.js';

// ---------------------------------------------------------------------------------------------
// Targets. Throughputs are minimums (events/s), latencies and memory maximums.
//
// Honest targets, set after measuring (bench/README.md has the figures): on the 2-core dev/CI
// machine (Debian 12, Node 20, local PostgreSQL 15 with fsync on), shared with concurrent test
// runs, results varied by ×2–3 between runs, and each target sits at about half of the lower
// results so that it flags regressions, not noise. The first guesses — append ≥ 300/s on PGlite
// and ≥ 500/s on Postgres, catch-up ≥ 1,000/s — were lowered: one append is one transaction of
// ~8 round trips plus a WAL flush, and on this machine even a bare 8-statement write transaction
// (no event store code) managed only ~210/s sequentially, so the store is at the machine's floor
// there, not the cause. An idle machine with a faster disk should do clearly better.
// ---------------------------------------------------------------------------------------------
const TARGETS = {
  appendPglite: 100, // events/s, sequential single-event appends (measured 118–294)
  appendPostgres: 100, // events/s, sequential single-event appends (measured 167–296)
  appendP99Ms: 50, // ms, p99 latency of one sequential append, both engines (measured 12–44)
  concurrentPostgres: 150, // events/s, WORKERS × PER_WORKER (measured 330–480)
  readAll: 5_000, // events/s, readAll pages (measured 11,800–37,500)
  catchUpPglite: 300, // events/s, projection catch-up (measured 536–1,230)
  catchUpPostgres: 500, // events/s, projection catch-up (measured 953–1,765)
  rssPeakMiB: 1_024, // MiB, peak resident set over the run; PGlite's WASM heap dominates (measured 754–875)
  rssAfterMiB: 400, // MiB, resident set at the end, every database closed, after GC (measured 274–319)
  // Cost per stream of one append to 1,600 existing streams ÷ the same for 100 streams, same run:
  // ~1 when an append is linear in its streams (es_append v6 measured 0.65–0.93; v5, quadratic,
  // 1.81 on PGlite and 2.16 on PostgreSQL, with 1,600 streams taking 3.3 s and 1.5 s).
  wideAppendRatio: 1.5,
} as const;

/** BENCH_STRICT=1 fails the run when a result is worse than its target by more than this factor. */
const STRICT_FACTOR = 2;

const SEQUENTIAL_APPENDS = 2_000;
const WORKERS = 8;
const PER_WORKER = 250;
const READ_PAGE = 1_000;
const READ_PASSES = 3;

const POSTGRES_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const STRICT = process.env.BENCH_STRICT === '1';

const logger = pino({ level: 'silent' });

// ---------------------------------------------------------------------------------------------

type Direction = 'min' | 'max';

interface Result {
  readonly name: string;
  readonly engine: string;
  readonly value: number;
  readonly unit: string;
  readonly target?: number;
  readonly direction?: Direction;
  readonly note?: string;
}

const results: Result[] = [];
const record = (result: Result) => {
  results.push(result);
  const target =
    result.target === undefined
      ? ''
      : ` (target ${result.direction === 'max' ? '≤' : '≥'} ${fmt(result.target)})`;
  console.log(`  ${result.engine.padEnd(8)} ${result.name}: ${fmt(result.value)} ${result.unit}${target}`);
};

const fmt = (n: number) =>
  n >= 100 ? Math.round(n).toLocaleString('en-US') : n >= 10 ? n.toFixed(1) : n.toFixed(2);

const mib = () => process.memoryUsage().rss / 1024 / 1024;

// `npm run bench` runs tsx without --expose-gc; turn it on at run time so RSS readings after a
// database is closed do not depend on when V8 happens to collect PGlite's WASM heap.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/**
 * RSS after full garbage collections, MiB. A closed PGlite's WASM memory is only returned once its
 * objects are collected and finalised, hence two collections with a pause between them.
 */
const settledMib = async () => {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 100));
  gc();
  return mib();
};

const percentile = (sorted: readonly number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN;

const isoIn = (base: number, ms: number) => new Date(base + ms).toISOString();

/** A SessionCreated event like the one `createSession` appends, for session `sessionId`. */
const sessionCreated = (sessionId: number): NewEvent<'SessionCreated', SessionCreatedData> => {
  const now = Date.now();
  return {
    id: uuidv4(),
    type: 'SessionCreated',
    data: {
      sessionId,
      tenantId: 1,
      clientId: 'bench-client',
      userId: 1 + (sessionId % 50),
      patientId: 1 + (sessionId % 500),
      encounterId: null,
      scopes: ['patient/Patient.rs', 'patient/QuestionnaireResponse.cruds', 'user/Questionnaire.rs'],
      deploymentMode: 'embedded',
      postSubmitRedirect: 'https://ehr.example.org/done',
      postCancelRedirect: null,
      handoverTokenHash: randomBytes(32).toString('hex'),
      handoverExpiresAt: isoIn(now, 5 * 60_000),
      createdAt: isoIn(now, 0),
      expiresAt: isoIn(now, 7.5 * 86_400_000),
    },
    metadata: {
      tenantId: 1,
      actor: { type: 'system', id: 'bench' },
      correlationId: uuidv4(),
      causationId: null,
      requestId: null,
      recordedAt: new Date(now).toISOString(),
    },
  };
};

/** An isolated database: fresh in-memory PGlite, or a fresh schema on the Postgres server. */
interface Database {
  readonly engine: 'pglite' | 'postgres';
  readonly sql: Sql;
  dispose(): Promise<void>;
}

const openPglite = async (): Promise<Database> => {
  const sql = await PgliteSql.open();
  return { engine: 'pglite', sql, dispose: () => sql.close() };
};

const openPostgres = async (): Promise<Database | undefined> => {
  const schema = `bench_${randomBytes(6).toString('hex')}`;
  const admin = new PostgresSql(POSTGRES_URL, { max: 1 });
  try {
    await admin.exec(`CREATE SCHEMA ${schema}`);
  } catch (error) {
    console.warn(`  postgres at ${redact(POSTGRES_URL)} unavailable, skipping: ${(error as Error).message}`);
    return undefined;
  } finally {
    await admin.close();
  }
  // One connection per concurrent worker plus one spare.
  const sql = new PostgresSql(POSTGRES_URL, { searchPath: schema, max: WORKERS + 2 });
  return {
    engine: 'postgres',
    sql,
    dispose: async () => {
      await sql.close().catch(() => undefined);
      const cleanup = new PostgresSql(POSTGRES_URL, { max: 1 });
      await cleanup.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await cleanup.close();
    },
  };
};

const redact = (url: string) => url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');

/** (a) Sequential single-event appends to distinct streams. */
const benchSequentialAppends = async (db: Database, store: EventStore, firstId: number) => {
  const latencies: number[] = [];
  const started = performance.now();
  for (let i = 0; i < SEQUENTIAL_APPENDS; i++) {
    const id = firstId + i;
    const t0 = performance.now();
    await store.append(sessionStream(id), [sessionCreated(id)], 'no_stream');
    latencies.push(performance.now() - t0);
  }
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const target = db.engine === 'pglite' ? TARGETS.appendPglite : TARGETS.appendPostgres;
  record({
    name: `append ×${SEQUENTIAL_APPENDS}, sequential`,
    engine: db.engine,
    value: SEQUENTIAL_APPENDS / seconds,
    unit: 'events/s',
    target,
    direction: 'min',
  });
  record({ name: 'append latency p50', engine: db.engine, value: percentile(latencies, 50), unit: 'ms' });
  record({
    name: 'append latency p99',
    engine: db.engine,
    value: percentile(latencies, 99),
    unit: 'ms',
    target: TARGETS.appendP99Ms,
    direction: 'max',
  });
};

/** (b) WORKERS concurrent workers, each appending PER_WORKER single-event appends to its own streams. */
const benchConcurrentAppends = async (db: Database, store: EventStore, firstId: number) => {
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      for (let i = 0; i < PER_WORKER; i++) {
        const id = firstId + w * PER_WORKER + i;
        const t0 = performance.now();
        await store.append(sessionStream(id), [sessionCreated(id)], 'no_stream');
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const total = WORKERS * PER_WORKER;
  record({
    name: `append ${WORKERS}×${PER_WORKER}, concurrent`,
    engine: db.engine,
    value: total / seconds,
    unit: 'events/s',
    target: TARGETS.concurrentPostgres,
    direction: 'min',
  });
  record({
    name: 'concurrent append latency p50',
    engine: db.engine,
    value: percentile(latencies, 50),
    unit: 'ms',
  });
  record({
    name: 'concurrent append latency p99',
    engine: db.engine,
    value: percentile(latencies, 99),
    unit: 'ms',
  });
};

/** (c) readAll over the whole log in pages, READ_PASSES times; returns the number of events in the log. */
const benchReadAll = async (db: Database, store: EventStore): Promise<number> => {
  let events = 0;
  const started = performance.now();
  for (let pass = 0; pass < READ_PASSES; pass++) {
    let from: Position | undefined;
    events = 0;
    for (;;) {
      const page = await store.readAll({ ...(from ? { from } : {}), maxCount: READ_PAGE });
      if (page.length === 0) break;
      events += page.length;
      from = page.at(-1)!.position;
    }
  }
  const seconds = (performance.now() - started) / 1000;
  record({
    name: `readAll ${fmt(events)} events ×${READ_PASSES}, pages of ${READ_PAGE}`,
    engine: db.engine,
    value: (events * READ_PASSES) / seconds,
    unit: 'events/s',
    target: TARGETS.readAll,
    direction: 'min',
  });
  return events;
};

/** (d) Projection catch-up from zero over the whole log, every projection, as `casebook replay` does. */
const benchCatchUp = async (db: Database, store: EventStore, expected: number) => {
  await migrateSequences(db.sql);
  const runner = new ProjectionRunner(store, db.sql, allProjections, logger);
  await runner.migrate();
  const started = performance.now();
  const applied = await runner.catchUp();
  const seconds = (performance.now() - started) / 1000;
  const [row] = await db.sql.query<{ n: string }>(`SELECT count(*)::text AS n FROM rm_sessions`);
  const rows = Number(row?.n ?? 0);
  if (applied !== expected || rows !== expected)
    console.warn(
      `  ${db.engine}: catch-up applied ${applied} events, rm_sessions has ${rows} rows; expected ${expected}`,
    );
  const target = db.engine === 'pglite' ? TARGETS.catchUpPglite : TARGETS.catchUpPostgres;
  record({
    name: `projection catch-up ×${applied} (${allProjections.length} projections)`,
    engine: db.engine,
    value: applied / seconds,
    unit: 'events/s',
    target,
    direction: 'min',
  });
};

/**
 * (e) One append to many existing streams (a transaction Bundle's reservations): the time per
 * stream at 1,600 streams against 100, so the figure is a ratio measured in one run.
 */
const benchWideAppends = async (db: Database, store: EventStore) => {
  const perStream: number[] = [];
  for (const n of [100, 1_600]) {
    const streams = Array.from({ length: n }, (_, i) => `bench-wide-${n}-${i}`);
    const event = () => ({ ...sessionCreated(0), type: 'BenchWideAppend' });
    await store.appendMany(
      streams.map((streamName) => ({ streamName, events: [event()], expectedState: 'no_stream' })),
    );
    const started = performance.now();
    await store.appendMany(
      streams.map((streamName) => ({ streamName, events: [event()], expectedState: 0n })),
    );
    const ms = performance.now() - started;
    perStream.push(ms / n);
    record({
      name: `appendMany to ${n.toLocaleString('en-US')} existing streams`,
      engine: db.engine,
      value: ms,
      unit: 'ms',
    });
  }
  record({
    name: 'per-stream cost, 1,600 streams ÷ 100',
    engine: db.engine,
    value: perStream[1]! / perStream[0]!,
    unit: '×',
    target: TARGETS.wideAppendRatio,
    direction: 'max',
  });
};

const runEngine = async (engine: Database['engine'], open: () => Promise<Database | undefined>) => {
  const db = await open();
  if (!db) return;
  record({ name: 'RSS with the database open (after GC)', engine, value: await settledMib(), unit: 'MiB' });
  const store = await openEventStore({ sql: db.sql });
  try {
    await benchSequentialAppends(db, store, 1);
    if (db.engine === 'postgres') await benchConcurrentAppends(db, store, SEQUENTIAL_APPENDS + 1);
    const events = await benchReadAll(db, store);
    await benchCatchUp(db, store, events);
    await benchWideAppends(db, store);
    record({ name: 'RSS after the benchmarks (after GC)', engine, value: await settledMib(), unit: 'MiB' });
  } finally {
    await store.close();
    await db.dispose();
  }
};

/** Runs one engine and records the RSS it leaves behind once closed and collected. */
const measureEngine = async (engine: Database['engine'], open: () => Promise<Database | undefined>) => {
  const before = await settledMib();
  await runEngine(engine, open);
  const after = await settledMib();
  record({
    name: 'RSS left after closing (after GC)',
    engine,
    value: after - before,
    unit: `MiB delta (${fmt(before)} → ${fmt(after)})`,
  });
};

const missBy = (r: Result): number | undefined => {
  if (r.target === undefined) return undefined;
  if (r.direction === 'max') return r.value / r.target;
  return r.value > 0 ? r.target / r.value : Number.POSITIVE_INFINITY;
};

const printTable = () => {
  const rows = results.map((r) => {
    const ratio = missBy(r);
    const status =
      ratio === undefined ? '' : ratio <= 1 ? 'ok' : ratio > STRICT_FACTOR ? 'MISSED (by a lot)' : 'missed';
    const target = r.target === undefined ? '' : `${r.direction === 'max' ? '≤' : '≥'} ${fmt(r.target)}`;
    return [r.engine, r.name, `${fmt(r.value)} ${r.unit}`, target, status];
  });
  const header = ['engine', 'benchmark', 'result', 'target', 'status'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ');
  console.log(`\n${line(header)}`);
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const row of rows) console.log(line(row));
};

const main = async () => {
  const started = performance.now();
  const rssStart = mib();
  console.log(
    `casebook bench — node ${process.version}, ${process.platform}/${process.arch}, ${cpus().length} CPUs, strict=${STRICT}`,
  );
  // Other processes competing for the CPUs (test runs, builds) move every number here.
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(`load average at start: ${load()}`);
  record({ name: 'RSS at start', engine: 'process', value: rssStart, unit: 'MiB' });

  let peak = rssStart;
  const sampler = setInterval(() => {
    peak = Math.max(peak, mib());
  }, 50);
  sampler.unref();

  console.log('\npglite (in memory)');
  await measureEngine('pglite', openPglite);

  console.log(`\npostgres (${redact(POSTGRES_URL)}, fresh schema)`);
  await measureEngine('postgres', openPostgres);

  clearInterval(sampler);
  peak = Math.max(peak, mib());
  record({
    name: 'RSS peak (sampled every 50 ms)',
    engine: 'process',
    value: peak,
    unit: 'MiB',
    target: TARGETS.rssPeakMiB,
    direction: 'max',
  });
  record({
    name: 'RSS at end (after GC)',
    engine: 'process',
    value: await settledMib(),
    unit: 'MiB',
    target: TARGETS.rssAfterMiB,
    direction: 'max',
  });
  printTable();

  console.log(`\nload average at end: ${load()}`);
  const seconds = (performance.now() - started) / 1000;
  const badly = results.filter((r) => (missBy(r) ?? 0) > STRICT_FACTOR);
  const missed = results.filter((r) => (missBy(r) ?? 0) > 1);
  console.log(
    `\nbench done in ${seconds.toFixed(1)} s: ${results.filter((r) => r.target !== undefined).length - missed.length} targets met, ${missed.length} missed (${badly.length} by more than ×${STRICT_FACTOR})`,
  );
  if (STRICT && badly.length > 0) {
    console.error(`BENCH_STRICT=1: failing, ${badly.map((r) => `${r.engine} ${r.name}`).join('; ')}`);
    process.exitCode = 1;
  }
};

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
