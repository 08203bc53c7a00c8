/**
 * The background thread (docs/architecture.md "Background thread"): started by
 * `BackgroundThread` (./thread.ts) with {@link BackgroundWorkerData}, it opens its own small pool on the
 * same PostgreSQL schema and runs there the {@link Sealer}, the follower of the deferred
 * projections and the {@link StatisticsKeeper}. It reports whether it is the active sealer (`{ active }`) and what each deferred
 * projection has committed (`{ deferred }`), skips the follower's pause on `{ type: 'hurry' }`,
 * and stops on `{ type: 'stop' }`, answering `{ stopped: true }` once its pool is closed.
 */
import { parentPort, workerData } from 'node:worker_threads';
import pino from 'pino';
import { PostgresSql } from '../db/sql.js';
import { StatisticsKeeper } from '../db/statistics.js';
import { openEventStore } from '../eventstore/index.js';
import { Sealer } from '../eventstore/sealer.js';
import { allProjections } from '../projections/index.js';
import { ProjectionRunner } from '../projections/runner/index.js';
import type { BackgroundMessage, BackgroundWorkerData } from './thread.js';

/** How often the thread tells whether its sealer is the active one, milliseconds. */
const REPORT_MS = 100;

const data = workerData as BackgroundWorkerData;
const port = parentPort;
if (!port) throw new Error('background/worker runs as a worker thread');
const post = (message: BackgroundMessage) => port.postMessage(message);
// The sealer holds one connection for its election and queries on another; the follower holds
// one to LISTEN for appends and writes the view on another; the statistics keeper needs one now
// and then.
const sql = new PostgresSql(data.connectionString, {
  ...(data.searchPath ? { searchPath: data.searchPath } : {}),
  max: (data.seal ? 2 : 0) + (data.followDeferred ? 2 : 0) + 1,
});
// The thread runs beside the SQL stores only (its seals and views live in the same database).
const store = await openEventStore({ sql });
const logger = pino({ level: data.logLevel }).child({ thread: 'background' });
const sealer = data.seal ? new Sealer(store, sql, logger) : undefined;
sealer?.start();
const runner = data.followDeferred
  ? new ProjectionRunner(
      store,
      sql,
      allProjections.filter((p) => p.deferred === true),
      logger,
      { mode: 'inline' },
    )
  : undefined;
runner?.deferredReached$.subscribe(({ name, position }) => post({ deferred: { name, position } }));
runner?.startDeferred();
const keeper = data.keepStatistics ? new StatisticsKeeper(sql, logger) : undefined;
keeper?.start();
let reported = false;
const report = setInterval(() => {
  const active = sealer?.active ?? false;
  if (active === reported) return;
  reported = active;
  post({ active });
}, REPORT_MS);
port.on('message', (message: { type?: string }) => {
  if (message?.type === 'hurry') runner?.hurryDeferred();
  if (message?.type !== 'stop') return;
  clearInterval(report);
  void (async () => {
    await sealer?.stop();
    await runner?.stop();
    await keeper?.stop();
    await store.close();
    await sql.close();
    post({ stopped: true });
    port.close();
  })();
});
