/**
 * `npm run bench:start` (issue 11 "Numbers to reach"): how long the embedded default (PGlite)
 * takes from spawning `casebook serve` (compiled, as `npm start` runs it; the build is done first and
 * not timed) to `/readyz` answering 200, on a fresh data directory and
 * again on the directory that run left, and the server's resident set after 5 s idle.
 * Targets: ≤ 5 s and ≤ 350 MB. BENCH_RUNS (default 1) repeats both starts.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildCasebook, freePort, rssMiB, spawnCasebook, waitFor200 } from './support/process.js';

const TARGET_MS = 5_000;
const TARGET_RSS_MB = 350;
const IDLE_MS = 5_000;
const RUNS = Number(process.env.BENCH_RUNS ?? 1);

/** Starts `casebook serve` on `dataDir`; returns ms to /readyz 200, RSS after IDLE_MS idle and its peak (MiB). */
const start = async (dataDir: string) => {
  const port = await freePort();
  const since = performance.now();
  const child = spawnCasebook(['serve'], {
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
  });
  try {
    const ms = await waitFor200(`http://127.0.0.1:${port}/readyz`, child, since);
    await sleep(IDLE_MS);
    const rss = rssMiB(child.pid);
    return { ms, rss: rss.now, peak: rss.peak };
  } finally {
    await child.stop();
  }
};

const main = async () => {
  buildCasebook();
  console.log(
    `bench:start — load average at start ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  const rows: string[][] = [];
  for (let run = 0; run < RUNS; run++) {
    const dataDir = mkdtempSync(join(tmpdir(), 'casebook-bench-start-'));
    try {
      for (const kind of ['fresh data dir', 'existing data dir']) {
        const r = await start(join(dataDir, 'data'));
        const mb = r.rss * 1.048576;
        rows.push([
          kind,
          `${(r.ms / 1000).toFixed(2)} s`,
          r.ms <= TARGET_MS ? 'pass' : 'MISS',
          `${Math.round(r.rss)} MiB`,
          mb <= TARGET_RSS_MB ? 'pass' : 'MISS',
          `${Math.round(r.peak)} MiB`,
        ]);
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }
  console.log(
    `load average at end ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}\n`,
  );
  console.log(
    `| start | to /readyz 200 (≤ 5 s) | | RSS after 5 s idle (≤ ${TARGET_RSS_MB} MB) | | peak RSS |`,
  );
  console.log('|---|---|---|---|---|---|');
  for (const row of rows) console.log(`| ${row.join(' | ')} |`);
};

await main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
