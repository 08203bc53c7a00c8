/**
 * The sealer's thread (docs/architecture.md "Tamper-evident log"): started by {@link SealerThread}
 * with {@link SealerWorkerData}, it opens its own small pool on the same PostgreSQL schema and runs
 * a {@link Sealer} there, so that reading, canonicalising and hashing every event costs the
 * serving thread nothing. It reports whether it is the active sealer (`{ active }`) and stops on
 * `{ type: 'stop' }`, answering `{ stopped: true }` once its pool is closed.
 */
import { parentPort, workerData } from 'node:worker_threads';
import pino from 'pino';
import { PostgresSql } from '../db/sql.js';
import { Sealer } from './sealer.js';
import type { SealerWorkerData } from './sealer-thread.js';
import { SqlEventStore } from './sql-event-store.js';

/** How often the thread tells whether its sealer is the active one, milliseconds. */
const REPORT_MS = 100;

const data = workerData as SealerWorkerData;
const port = parentPort;
if (!port) throw new Error('sealer-worker runs as a worker thread');
const sql = new PostgresSql(data.connectionString, {
  ...(data.searchPath ? { searchPath: data.searchPath } : {}),
  max: 2,
});
const store = await SqlEventStore.open(sql);
const sealer = new Sealer(store, sql, pino({ level: data.logLevel }).child({ thread: 'sealer' }));
sealer.start();
let reported = false;
const report = setInterval(() => {
  if (sealer.active === reported) return;
  reported = sealer.active;
  port.postMessage({ active: reported });
}, REPORT_MS);
port.on('message', (message: { type?: string }) => {
  if (message?.type !== 'stop') return;
  clearInterval(report);
  void (async () => {
    await sealer.stop();
    await store.close();
    await sql.close();
    port.postMessage({ stopped: true });
    port.close();
  })();
});
