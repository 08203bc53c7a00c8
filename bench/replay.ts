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
 * 3. Beside it, the raw baseline of the same run (this machine's speed moves by ±15 % within
 *    minutes and about ×2 between hours): a plain node-postgres loop that reads the same log in
 *    pages of 2,500 events, parses them, and writes each page's data into one unindexed table
 *    with one INSERT per page, reading the next page while it writes. It runs before and after
 *    the replay; the ratio of the replay's events/s to their mean says how much of the machine's
 *    raw copy speed the rebuild of eleven read models reaches.
 * Targets: ≥ 25,000 events/s, peak RSS < 400 MB (issue 11). BENCH_KEEP=1 keeps the schema.
 */
import { createHash, randomBytes } from 'node:crypto';
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

/**
 * Runs `casebook verify --seal` on `schema`: seals what the generator left unsealed, then checks the
 * whole log against its seals (docs/architecture.md "Tamper-evident log"); returns its exit code
 * and output.
 */
const verify = async (schema: string): Promise<{ code: number | null; output: string }> => {
  const child = spawnCasebook(['verify', '--seal'], {
    DATABASE_URL: withSchemaUrl(schema),
    LOG_LEVEL: 'warn',
  });
  const code = await new Promise<number | null>((resolve) => child.process.once('exit', resolve));
  return { code, output: child.output() };
};

/**
 * md5 of the rows of every read-model table of `schema` (`rm_*`), each row as text, in text order:
 * two versions of the code replaying one log built the same read models when these agree.
 */
const readModelDigests = async (admin: PostgresSql, schema: string): Promise<Record<string, string>> => {
  const tables = await admin.query<{ name: string }>(
    `SELECT tablename AS name FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'rm\\_%' ORDER BY 1`,
    [schema],
  );
  const digests: Record<string, string> = {};
  for (const { name } of tables) {
    const [row] = await admin.query<{ n: number; md5: string | null }>(
      `SELECT count(*)::int AS n, md5(string_agg(t::text, E'\\n' ORDER BY t::text)) AS md5 FROM ${schema}.${name} t`,
    );
    digests[name] = `${row?.n ?? 0} rows ${row?.md5 ?? '-'}`;
  }
  return digests;
};

const RAW_PAGE = 2500;

/**
 * The raw baseline (step 3 above): copies the log of `schema` page by page into a fresh
 * `bench_raw_copy` table (dropped after), each page's INSERT in its own transaction without
 * waiting for the WAL flush, as the catch-up commits. Returns the events copied and the wall time (ms).
 */
const rawCopy = async (schema: string): Promise<{ events: number; ms: number }> => {
  const sql = new PostgresSql(POSTGRES_URL, { searchPath: schema, max: 2 });
  try {
    await sql.exec(
      'DROP TABLE IF EXISTS bench_raw_copy; CREATE TABLE bench_raw_copy (position bigint, type text, data json)',
    );
    type Row = { position: string; type: string; data: unknown; metadata: unknown };
    const read = (after: string) =>
      sql.query<Row>(
        `SELECT position::text AS position, type, data, metadata FROM es_events WHERE position > $1
          ORDER BY position LIMIT ${RAW_PAGE}`,
        [after],
      );
    const started = performance.now();
    let events = 0;
    let page = await read('0');
    while (page.length > 0) {
      const last = page.at(-1)!.position;
      const next = read(last);
      await sql.transaction(async (tx) => {
        await tx.exec('SET LOCAL synchronous_commit = off');
        await tx.query(
          `INSERT INTO bench_raw_copy (position, type, data)
           SELECT * FROM ROWS FROM (unnest($1::bigint[]), unnest($2::text[]), json_array_elements($3::json))`,
          [page.map((r) => r.position), page.map((r) => r.type), JSON.stringify(page.map((r) => r.data))],
        );
      });
      events += page.length;
      page = await next;
    }
    const ms = performance.now() - started;
    await sql.exec('DROP TABLE bench_raw_copy');
    return { events, ms };
  } finally {
    await sql.close();
  }
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
    const rawBefore = await rawCopy(schema);
    const run = await replay(schema);
    const rawAfter = await rawCopy(schema);
    const verified = await verify(schema);
    const digests = await readModelDigests(admin, schema);
    const rawRate = (rawBefore.events + rawAfter.events) / ((rawBefore.ms + rawAfter.ms) / 1000);
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
        'raw copy of the same log, same run (before / after the replay)',
        `${Math.round(rawRate).toLocaleString('en-US')} events/s (${(rawBefore.ms / 1000).toFixed(1)} s / ${(rawAfter.ms / 1000).toFixed(1)} s)`,
        '',
        '',
      ],
      ['replay ÷ raw copy', `${Math.round((rate / rawRate) * 100)} %`, '', ''],
      [
        'peak RSS of the replay process',
        `${Math.round(run.peak)} MiB`,
        `< ${TARGET_RSS_MB} MB`,
        run.peak * 1.048576 < TARGET_RSS_MB ? 'pass' : 'MISS',
      ],
    ];
    rows.push([
      '`casebook verify --seal` after the replay',
      `exit ${verified.code}`,
      'exit 0',
      verified.code === 0 ? 'pass' : 'MISS',
    ]);
    const all = createHash('md5').update(JSON.stringify(digests)).digest('hex');
    rows.push(['md5 of every read-model table (rm_*)', all, '', '']);
    console.log('| measure | value | target | |\n|---|---|---|---|');
    for (const row of rows) console.log(`| ${row.join(' | ')} |`);
    if (verified.code !== 0) console.log(`\ncasebook verify:\n${verified.output}`);
    if (process.env.BENCH_MD5 === '1')
      for (const [table, digest] of Object.entries(digests)) console.log(`${table}: ${digest}`);
  } finally {
    if (!reuse && process.env.BENCH_KEEP !== '1')
      await admin.exec(
        `DROP SCHEMA IF EXISTS ${schema} CASCADE; DROP SCHEMA IF EXISTS ${schema}_keys CASCADE`,
      );
    else console.log(`schema kept: BENCH_SCHEMA=${schema}`);
    await admin.close();
  }
};

await main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
