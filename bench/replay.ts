/**
 * `npm run bench:replay` (issue 11 "Numbers to reach"): how fast `casebook replay` rebuilds every
 * read model from a log of BENCH_EVENTS (default 200,000) realistic events on PostgreSQL, and the
 * peak resident set of the replaying process.
 *
 * 1. A fresh schema; the log is generated through the event store's `appendMany`
 *    (bench/support/log.ts). With BENCH_SCHEMA=<schema> an existing log is reused (and kept).
 * 2. `casebook replay` runs as a child process, compiled as `npm start` runs casebook
 *    (`node dist/cli/main.js replay`, built first), with DATABASE_URL on that schema; its wall time and VmHWM (sampled from /proc every 100 ms) are
 *    reported. BENCH_CPU_PROF=1 writes a V8 CPU profile of it to ./bench-profiles.
 * Targets: ≥ 25,000 events/s, peak RSS < 400 MB. BENCH_KEEP=1 keeps the schema.
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { PostgresSql } from '../src/db/sql.js';
import { openEventStore } from '../src/eventstore/index.js';
import { generateLog } from './support/log.js';
import { buildCasebook, rssMiB, spawnCasebook } from './support/process.js';

const POSTGRES_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const EVENTS = Number(process.env.BENCH_EVENTS ?? 200_000);
const TARGET_EVENTS_PER_SECOND = 25_000;
const TARGET_RSS_MB = 400;

const withSchemaUrl = (schema: string) => {
  const url = new URL(POSTGRES_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return url.toString();
};

/** Runs `casebook replay` on `schema`; returns its wall time (ms), peak RSS (MiB) and output. */
const replay = async (schema: string) => {
  const nodeArgs = process.env.BENCH_CPU_PROF === '1' ? ['--cpu-prof', '--cpu-prof-dir=bench-profiles'] : [];
  buildCasebook(); // before the clock starts
  const started = performance.now();
  const child = spawnCasebook(
    ['replay'],
    { DATABASE_URL: withSchemaUrl(schema), LOG_LEVEL: 'warn' },
    nodeArgs,
  );
  let peak = 0;
  const sampler = setInterval(() => {
    try {
      peak = Math.max(peak, rssMiB(child.pid).peak);
    } catch {
      // exited
    }
  }, 100);
  const code = await new Promise<number | null>((resolve) => child.process.once('exit', resolve));
  clearInterval(sampler);
  const ms = performance.now() - started;
  if (code !== 0) throw new Error(`casebook replay exited with ${code}:\n${child.output()}`);
  return { ms, peak, output: child.output() };
};

const main = async () => {
  console.log(
    `bench:replay — load average at start ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  const reuse = process.env.BENCH_SCHEMA;
  const schema = reuse ?? `bench_replay_${randomBytes(4).toString('hex')}`;
  const admin = new PostgresSql(POSTGRES_URL, { max: 1 });
  try {
    if (!reuse) {
      await admin.exec(`CREATE SCHEMA ${schema}`);
      const sql = new PostgresSql(POSTGRES_URL, { searchPath: schema, max: 16 });
      const store = await openEventStore({ sql });
      const started = performance.now();
      let shown = 0;
      const appended = await generateLog(store, EVENTS, {
        concurrency: 16,
        onProgress: (n) => {
          if (n - shown >= 20_000) {
            shown = n;
            process.stderr.write(`\rgenerated ${n} events`);
          }
        },
      });
      const seconds = (performance.now() - started) / 1000;
      console.log(
        `\ngenerated ${appended} events in ${seconds.toFixed(1)} s (${Math.round(appended / seconds)} events/s) into ${schema}`,
      );
      await store.close();
      await sql.close();
      // A log at rest, as autovacuum leaves it: the replay does not pay for the generator's
      // unfinished housekeeping (hint bits, statistics) on its first read.
      await admin.exec(`VACUUM (ANALYZE) ${schema}.es_events, ${schema}.es_streams`);
    }
    const [{ count } = { count: 0 }] = await admin.query<{ count: number }>(
      `SELECT count(*)::int AS count FROM ${schema}.es_events`,
    );
    const run = await replay(schema);
    const replayed = Number(/"replayed":\s*(\d+)/.exec(run.output)?.[1] ?? count);
    const rate = replayed / (run.ms / 1000);
    console.log(
      `load average at end ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}\n`,
    );
    const rows = [
      ['log', `${count.toLocaleString('en-US')} events`, '≥ 200,000', count >= 200_000 ? 'pass' : 'MISS'],
      ['casebook replay, wall time (process start to exit)', `${(run.ms / 1000).toFixed(1)} s`, '', ''],
      [
        'replay throughput',
        `${Math.round(rate).toLocaleString('en-US')} events/s`,
        `≥ ${TARGET_EVENTS_PER_SECOND.toLocaleString('en-US')}`,
        rate >= TARGET_EVENTS_PER_SECOND ? 'pass' : 'MISS',
      ],
      [
        'peak RSS of the replay process',
        `${Math.round(run.peak)} MiB`,
        `< ${TARGET_RSS_MB} MB`,
        run.peak * 1.048576 < TARGET_RSS_MB ? 'pass' : 'MISS',
      ],
    ];
    console.log('| measure | value | target | |\n|---|---|---|---|');
    for (const row of rows) console.log(`| ${row.join(' | ')} |`);
  } finally {
    if (!reuse && process.env.BENCH_KEEP !== '1') await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    else console.log(`schema kept: BENCH_SCHEMA=${schema}`);
    await admin.close();
  }
};

await main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
