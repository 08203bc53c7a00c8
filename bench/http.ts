/**
 * `npm run bench:http` (issue 11 "Numbers to reach"): casebook's HTTP throughput as a ratio of a
 * raw Koa + pg server's, all measured in one run on one machine, so that the ratios hold on a busy
 * box where absolute numbers do not.
 *
 * Systems, each a child process:
 *   raw               bench/support/baseline.ts on PostgreSQL: INSERT jsonb / SELECT by id, casebook's body parser
 *   casebook-postgres `casebook serve` (compiled, as `npm start` runs it) on PostgreSQL, a fresh schema (dropped at the end)
 *   raw-pglite        bench/support/baseline.ts on PGlite, opened as casebook opens it
 *   casebook-pglite   `casebook serve` on PGlite in a fresh data directory
 * and `casebook serve` on the same PostgreSQL schema with AUDIT_READS=false, for what auditing
 * reads costs.
 *
 * Each request shape gets BENCH_WARMUP seconds (default 2) of warm-up, then BENCH_DURATION seconds
 * (default 10) measured with autocannon, 20 connections unless said otherwise. Each casebook is
 * compared with the raw server on its own engine, which runs throughout its casebook's runs: each
 * ratio divides by the mean of the raw shape measured just before and just after the casebook run
 * (column `paired RPS`), as this VM's speed drifts within minutes. PostgreSQL comes
 * from BENCH_DATABASE_URL, else TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test.
 * bench/README.md explains the table.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type Measured, measure, type Shape } from './support/load.js';
import { freePort, spawnCasebook, spawnTs, waitFor200, waitForOutput, waitIdle } from './support/process.js';

const POSTGRES_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const SECONDS = Number(process.env.BENCH_DURATION ?? 10);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
/**
 * How many times each ratio is measured (default 1): its row then shows the round with the median
 * ratio and the spread of all rounds, as this machine's speed moves within minutes.
 */
const ROUNDS = Math.max(1, Math.floor(Number(process.env.BENCH_ROUNDS ?? 1)) || 1);
const CONNECTIONS = 20;
/** Patients created before the reads, each with its own identifier. */
const PRELOADED = 500;

/** Issue 34 "Numbers that must hold" (issue 11's scaling target kept). */
const TARGETS = {
  post: 0.3, // POST /Patient ÷ raw INSERT
  scaling: 4, // POST /Patient with 20 connections ÷ with 1
  getId: 0.55, // GET /Patient/{id} ÷ raw SELECT by id
  getIdentifier: 0.4, // GET /Patient?identifier= ÷ raw SELECT by id
  session: 0.15, // POST /auth/sessions ÷ raw INSERT
  audited: 0.75, // GET /Patient/{id} audited ÷ not audited
} as const;

const SYSTEM = 'urn:bench:patient';
const CLIENT_ID = 'bench-client';
const CLIENT_SECRET = randomBytes(18).toString('base64url');
const AUTH = `Basic ${Buffer.from(`${CLIENT_ID}:${CLIENT_SECRET}`).toString('base64')}`;
const FHIR_JSON = { 'content-type': 'application/fhir+json', authorization: AUTH };
const RUN = randomBytes(4).toString('hex');
let counter = 0;

/** A realistic Patient with an identifier no other request of this run uses. */
const patientBody = () => {
  counter += 1;
  return JSON.stringify({
    resourceType: 'Patient',
    identifier: [{ system: SYSTEM, value: `${RUN}-${counter}` }],
    name: [{ family: 'Bench', given: ['Ada', `N${counter}`] }],
    gender: counter % 2 ? 'female' : 'male',
    birthDate: `19${50 + (counter % 50)}-0${1 + (counter % 9)}-1${counter % 10}`,
  });
};

const pick = <T>(values: readonly T[]): T => values[Math.floor(Math.random() * values.length)] as T;

interface Row {
  readonly system: string;
  readonly request: string;
  readonly connections: number;
  readonly measured: Measured;
  /** `ratio` of `against`, and its target. */
  readonly ratio?: { value: number; against: string; target: number };
  /** The raw RPS the ratio divides by: the mean of the raw runs just before and just after. */
  readonly pairedRaw?: number;
  /** The audited GET's RPS in the runs just before and after a not-audited one (their mean). */
  readonly pairedAudited?: number;
  /** The lowest and highest ratio over BENCH_ROUNDS rounds (the row shows the median round). */
  readonly spread?: { low: number; high: number };
}

/**
 * Runs `round` ROUNDS times and keeps the round whose ratio is the median (the lower middle one
 * for an even count), with the spread of all of them.
 */
const medianRound = async <T extends { ratio: number }>(
  round: () => Promise<T>,
): Promise<T & { spread?: { low: number; high: number } }> => {
  const results: T[] = [];
  for (let i = 0; i < ROUNDS; i++) results.push(await round());
  const sorted = [...results].sort((a, b) => a.ratio - b.ratio);
  const median = sorted[Math.floor((sorted.length - 1) / 2)] as T;
  if (ROUNDS === 1) return median;
  return { ...median, spread: { low: sorted[0]!.ratio, high: sorted.at(-1)!.ratio } };
};

const rows: Row[] = [];

const withSchemaUrl = (schema: string) => {
  const url = new URL(POSTGRES_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return url.toString();
};

const createSchema = async (admin: pg.Client, prefix: string) => {
  const schema = `${prefix}_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE SCHEMA ${schema}`);
  return schema;
};

const run = (url: string, shape: Shape, pid: number, connections = CONNECTIONS) =>
  measure(url, shape, { connections, seconds: SECONDS, warmupSeconds: WARMUP, pid });

/**
 * The raw baseline, running for the whole bench: its standalone INSERT (20 and 1 connections) and
 * SELECT by id rows, and `paired`, which measures a raw shape again next to a casebook run.
 */
interface Raw {
  /** How the table names it: `raw` (PostgreSQL) or `raw PGlite`. */
  readonly label: string;
  readonly insert: Shape;
  readonly select: Shape;
  /** Measures `shape` on the raw server (a paired run: not a row of its own). */
  measure(shape: Shape): Promise<Measured>;
  stop(): Promise<void>;
}

/**
 * Starts a raw baseline, preloads its Patients and measures its standalone rows.
 * @param system `raw` on PostgreSQL (`schema`), or `raw-pglite` on PGlite (a data directory).
 */
const startRaw = async (
  system: 'raw' | 'raw-pglite',
  database: { schema: string } | { pgliteDir: string },
): Promise<Raw> => {
  const port = await freePort();
  const child = spawnTs('bench/support/baseline.ts', [], {
    ...('schema' in database
      ? { BASELINE_DATABASE_URL: withSchemaUrl(database.schema) }
      : { BASELINE_PGLITE_DIR: database.pgliteDir }),
    PORT: String(port),
  });
  try {
    const base = `http://127.0.0.1:${port}`;
    await waitForOutput(child, 'listening');
    const ids: string[] = [];
    for (let i = 0; i < PRELOADED; i++) {
      const response = await fetch(`${base}/Patient`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: patientBody(),
      });
      ids.push(String(((await response.json()) as { id: string }).id));
    }
    const insert: Shape = {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      next: () => ({ path: '/Patient', body: patientBody() }),
    };
    const select: Shape = { method: 'GET', headers: {}, next: () => ({ path: `/Patient/${pick(ids)}` }) };
    const post20 = await run(base, insert, child.pid);
    rows.push({ system, request: 'INSERT jsonb', connections: CONNECTIONS, measured: post20 });
    const post1 = await run(base, insert, child.pid, 1);
    rows.push({ system, request: 'INSERT jsonb', connections: 1, measured: post1 });
    const get = await run(base, select, child.pid);
    rows.push({ system, request: 'SELECT by id', connections: CONNECTIONS, measured: get });
    return {
      label: system === 'raw' ? 'raw' : 'raw PGlite',
      insert,
      select,
      measure: (shape) => run(base, shape, child.pid),
      stop: () => child.stop(),
    };
  } catch (error) {
    await child.stop();
    throw error;
  }
};

/**
 * Measures a casebook shape with the raw shape it is compared to measured just before and just
 * after it (a paired design: this VM's speed drifts by a third within minutes, so a raw figure from
 * minutes earlier can make a ratio by itself). The ratio divides by the mean of the two raw runs.
 */
const paired = async (
  raw: Raw,
  rawShape: Shape,
  casebookPid: number,
  measureCasebook: () => Promise<Measured>,
) => {
  // The raw runs wait for casebook to be idle too (what its run left behind is not charged to them).
  await waitIdle(casebookPid);
  const before = await raw.measure(rawShape);
  const measured = await measureCasebook();
  await waitIdle(casebookPid);
  const after = await raw.measure(rawShape);
  return { measured, rawRps: (before.rps + after.rps) / 2 };
};

/** Starts `casebook serve` with `env` and a seed of one tenant and one API client; waits for /readyz. */
const startCasebook = async (env: Record<string, string>, seedFile: string) => {
  const port = await freePort();
  const child = spawnCasebook(['serve'], {
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    CASEBOOK_SEED: seedFile,
    ...env,
  });
  await waitFor200(`http://127.0.0.1:${port}/readyz`, child, performance.now());
  return { child, base: `http://127.0.0.1:${port}` };
};

/** Creates the Practitioner and PRELOADED Patients the reads and sessions use. */
const preload = async (base: string) => {
  const post = async (type: string, body: string) => {
    const response = await fetch(`${base}/fhir/r5/${type}`, { method: 'POST', headers: FHIR_JSON, body });
    if (response.status !== 201) throw new Error(`POST ${type}: ${response.status} ${await response.text()}`);
    return String(((await response.json()) as { id: string | number }).id);
  };
  const practitioner = await post(
    'Practitioner',
    JSON.stringify({
      resourceType: 'Practitioner',
      identifier: [{ system: 'urn:bench:staff', value: `${RUN}-dr` }],
      name: [{ family: 'House' }],
    }),
  );
  const patients: { id: string; identifier: string }[] = [];
  for (let i = 0; i < PRELOADED; i++) {
    const body = patientBody();
    patients.push({ id: await post('Patient', body), identifier: `${RUN}-${counter}` });
  }
  return { practitioner, patients };
};

/** Measures casebook's POST (20 and 1 connections), GET by id, search by identifier and sessions. */
const benchCasebook = async (
  system: string,
  env: Record<string, string>,
  seedFile: string,
  raw: Raw,
  /** Runs before the server stops (the not-audited comparison), with its address and Patients. */
  also?: (server: { base: string; pid: number }, ids: readonly string[]) => Promise<void>,
) => {
  const { child, base } = await startCasebook(env, seedFile);
  try {
    const { practitioner, patients } = await preload(base);
    const create: Shape = {
      method: 'POST',
      headers: FHIR_JSON,
      next: () => ({ path: '/fhir/r5/Patient', body: patientBody() }),
    };
    /**
     * Measures `shape` on casebook paired with the raw shape it is compared to (`against`), and
     * records the row with its ratio to their mean.
     */
    const pairedRow = async (
      request: string,
      shape: Shape,
      rawRequest: 'INSERT' | 'SELECT',
      target: number,
    ): Promise<Measured> => {
      const rawShape = rawRequest === 'INSERT' ? raw.insert : raw.select;
      const against = `${raw.label} ${rawRequest}`;
      const { measured, rawRps, ratio, spread } = await medianRound(async () => {
        const round = await paired(raw, rawShape, child.pid, () => run(base, shape, child.pid));
        return { ...round, ratio: round.measured.rps / round.rawRps };
      });
      rows.push({
        system,
        request,
        connections: CONNECTIONS,
        measured,
        ratio: { value: ratio, against, target },
        pairedRaw: rawRps,
        ...(spread ? { spread } : {}),
      });
      return measured;
    };
    const read = (path: () => string): Shape => ({
      method: 'GET',
      headers: { authorization: AUTH },
      next: () => ({ path: path() }),
    });
    const post20 = await pairedRow('POST /Patient', create, 'INSERT', TARGETS.post);
    const post1 = await run(base, create, child.pid, 1);
    rows.push({
      system,
      request: 'POST /Patient',
      connections: 1,
      measured: post1,
      ratio: { value: post20.rps / post1.rps, against: '20 conn ÷ 1 conn', target: TARGETS.scaling },
    });
    await pairedRow(
      'GET /Patient/{id}',
      read(() => `/fhir/r5/Patient/${pick(patients).id}`),
      'SELECT',
      TARGETS.getId,
    );
    await pairedRow(
      'GET /Patient?identifier=',
      read(
        () => `/fhir/r5/Patient?identifier=${encodeURIComponent(`${SYSTEM}|${pick(patients).identifier}`)}`,
      ),
      'SELECT',
      TARGETS.getIdentifier,
    );
    await pairedRow(
      'POST /auth/sessions (find)',
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: AUTH },
        next: () => ({
          path: '/auth/sessions',
          body: JSON.stringify({
            user: Number(practitioner),
            fhirContext: [
              {
                type: 'Patient',
                identifier: { system: SYSTEM, value: pick(patients).identifier },
                role: 'https://casebook.dev/fhir/role/find',
              },
            ],
          }),
        }),
      },
      'INSERT',
      TARGETS.session,
    );
    await also?.(
      { base, pid: child.pid },
      patients.map((p) => p.id),
    );
  } finally {
    await child.stop();
  }
};

/**
 * GET /Patient/{id} on a casebook that does not audit reads (a second server on the same schema),
 * paired with the audited server: audited, not audited, audited again, one after the other; the
 * ratio divides the mean of the two audited runs by the not-audited one.
 */
const benchUnaudited = async (
  env: Record<string, string>,
  seedFile: string,
  audited: { base: string; pid: number },
  ids: readonly string[],
) => {
  const { child, base } = await startCasebook({ ...env, AUDIT_READS: 'false' }, seedFile);
  const read: Shape = {
    method: 'GET',
    headers: { authorization: AUTH },
    next: () => ({ path: `/fhir/r5/Patient/${pick(ids)}` }),
  };
  try {
    const { measured, auditedRps, ratio, spread } = await medianRound(async () => {
      // Each run waits for the other server to be idle too (its sealing and AuditEvent indexing).
      await waitIdle(child.pid);
      const before = await run(audited.base, read, audited.pid);
      await waitIdle(audited.pid);
      const measured = await run(base, read, child.pid);
      await waitIdle(child.pid);
      const after = await run(audited.base, read, audited.pid);
      const auditedRps = (before.rps + after.rps) / 2;
      return { measured, auditedRps, ratio: auditedRps / measured.rps };
    });
    rows.push({
      system: 'casebook-postgres',
      request: 'GET /Patient/{id}, AUDIT_READS=false',
      connections: CONNECTIONS,
      measured,
      ratio: { value: ratio, against: 'audited ÷ not audited', target: TARGETS.audited },
      pairedAudited: auditedRps,
      ...(spread ? { spread } : {}),
    });
  } finally {
    await child.stop();
  }
};

const fmt = (n: number, digits = 0) =>
  Number.isFinite(n)
    ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '—';

const printTable = () => {
  const header = [
    'system',
    'request',
    'conns',
    'RPS',
    'p50 ms',
    'p99 ms',
    'failed',
    'ratio',
    ...(ROUNDS > 1 ? [`${ROUNDS} rounds`] : []),
    'of',
    'paired RPS',
    'target',
    '',
    'CPU ms/req',
    'machine ms/req',
    'idle',
  ];
  const lines = rows.map((r) => [
    r.system,
    r.request,
    String(r.connections),
    fmt(r.measured.rps),
    fmt(r.measured.p50, 1),
    fmt(r.measured.p99, 1),
    fmt(r.measured.failures),
    r.ratio ? (r.ratio.target >= 1 ? `×${fmt(r.ratio.value, 1)}` : `${fmt(r.ratio.value * 100)} %`) : '',
    ...(ROUNDS > 1 ? [r.spread ? `${fmt(r.spread.low * 100)}–${fmt(r.spread.high * 100)} %` : ''] : []),
    r.ratio?.against ?? '',
    r.pairedRaw === undefined
      ? r.pairedAudited === undefined
        ? ''
        : fmt(r.pairedAudited)
      : fmt(r.pairedRaw),
    r.ratio ? (r.ratio.target >= 1 ? `≥ ×${r.ratio.target}` : `≥ ${Math.round(r.ratio.target * 100)} %`) : '',
    r.ratio ? (r.ratio.value >= r.ratio.target ? 'pass' : 'MISS') : '',
    fmt(r.measured.cpuPerRequest, 2),
    fmt(r.measured.machinePerRequest, 2),
    `${fmt(r.measured.idle * 100)} %`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  console.log(line(header));
  console.log(line(widths.map((w) => '-'.repeat(w))));
  for (const l of lines) console.log(line(l));
};

const main = async () => {
  console.log(
    `bench:http — ${SECONDS} s per run after ${WARMUP} s warm-up, ${CONNECTIONS} connections, ${ROUNDS} round${ROUNDS > 1 ? 's' : ''} per ratio; load average at start ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  const schemas: string[] = [];
  const dataDir = mkdtempSync(join(tmpdir(), 'casebook-bench-http-'));
  const seedFile = join(dataDir, 'seed.json');
  writeFileSync(
    seedFile,
    JSON.stringify({
      tenants: [
        {
          name: 'Bench Hospital',
          ehr_managed: false,
          allowed_scopes: 'patient/*.* user/*.*',
          clients: [
            { client_id: CLIENT_ID, client_secret: CLIENT_SECRET, scopes: 'system/*.*', projects: ['bench'] },
          ],
        },
      ],
    }),
  );
  const raws: Raw[] = [];
  try {
    const rawSchema = await createSchema(admin, 'bench_raw');
    schemas.push(rawSchema);
    console.log('raw Koa + pg…');
    const raw = await startRaw('raw', { schema: rawSchema });
    raws.push(raw);
    const cbSchema = await createSchema(admin, 'bench_http');
    schemas.push(cbSchema);
    const pgEnv = { DATABASE_URL: withSchemaUrl(cbSchema) };
    console.log('casebook on PostgreSQL…');
    await benchCasebook('casebook-postgres', pgEnv, seedFile, raw, async (audited, ids) => {
      console.log('casebook on PostgreSQL, AUDIT_READS=false, paired with the audited server…');
      await benchUnaudited(pgEnv, seedFile, audited, ids);
    });
    // PGlite is compared with PGlite: the same engine, opened the same way, in one process.
    await raw.stop();
    raws.splice(0);
    console.log('raw Koa + PGlite…');
    const rawPglite = await startRaw('raw-pglite', { pgliteDir: join(dataDir, 'raw-pglite') });
    raws.push(rawPglite);
    console.log('casebook on PGlite…');
    await benchCasebook('casebook-pglite', { DATA_DIR: join(dataDir, 'pglite') }, seedFile, rawPglite);
  } finally {
    for (const raw of raws) await raw.stop();
    // With each casebook schema its key store (`<schema>_keys`, docs/architecture.md "Erasure").
    for (const schema of schemas)
      await admin.query(
        `DROP SCHEMA IF EXISTS ${schema} CASCADE; DROP SCHEMA IF EXISTS ${schema}_keys CASCADE`,
      );
    await admin.end();
    rmSync(dataDir, { recursive: true, force: true });
  }
  console.log(
    `\nload average at end ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}\n`,
  );
  printTable();
  printCeilings();
};

/**
 * What this machine's cores allow each casebook at the CPU its requests cost in this run (machine
 * ms/req, everything running included): the most RPS with no idle time left, for the POST scaling
 * and the GET by id ratio. A measured figure below its ceiling was bound by latency (idle time),
 * one at its ceiling by CPU. First, how the raw servers' INSERT scaled in the same run.
 */
const printCeilings = () => {
  const cores = availableParallelism();
  const find = (system: string, request: string, connections = CONNECTIONS) =>
    rows.find((r) => r.system === system && r.request === request && r.connections === connections);
  console.log(`\nCPU ceilings (${cores} cores, no idle time):`);
  // What the raw server's own INSERT gains from 20 connections in this run: the same machine's
  // bound on a write's scaling, beside casebook's.
  for (const system of ['raw', 'raw-pglite']) {
    const insert20 = find(system, 'INSERT jsonb');
    const insert1 = find(system, 'INSERT jsonb', 1);
    if (insert20 && insert1)
      console.log(
        `- ${system} INSERT jsonb: ×${fmt(insert20.measured.rps / insert1.measured.rps, 1)} from 1 to ${CONNECTIONS} connections (${fmt(insert20.measured.idle * 100)} % idle)`,
      );
  }
  for (const system of [...new Set(rows.map((r) => r.system))].filter((s) => s.startsWith('casebook'))) {
    const post20 = find(system, 'POST /Patient');
    const post1 = find(system, 'POST /Patient', 1);
    const get = find(system, 'GET /Patient/{id}');
    if (post20 && post1) {
      const most = (cores * 1000) / post20.measured.machinePerRequest;
      console.log(
        `- ${system} POST /Patient: ${fmt(post20.measured.machinePerRequest, 2)} ms a request allow ${fmt(most)} RPS, ×${fmt(most / post1.measured.rps, 1)} of one connection (measured ×${fmt(post20.measured.rps / post1.measured.rps, 1)}, ${fmt(post20.measured.idle * 100)} % idle)`,
      );
    }
    if (get?.pairedRaw) {
      const most = (cores * 1000) / get.measured.machinePerRequest;
      console.log(
        `- ${system} GET /Patient/{id}: ${fmt(get.measured.machinePerRequest, 2)} ms a request allow ${fmt(most)} RPS, ${fmt((100 * most) / get.pairedRaw)} % of the paired raw SELECT (measured ${fmt((100 * get.measured.rps) / get.pairedRaw)} %, ${fmt(get.measured.idle * 100)} % idle)`,
      );
    }
  }
};

await main().catch((error: unknown) => {
  if (rows.length > 0) printTable();
  console.error(error);
  process.exitCode = 1;
});
