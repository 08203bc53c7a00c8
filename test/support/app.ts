/**
 * A running casebook for integration tests: real database (PGlite or Postgres), real event store,
 * real projection runner, real HTTP server on an ephemeral port, and a clock tests can move.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { type Casebook, openCasebook } from '../../src/casebook.js';
import { applySeed, type Seed } from '../../src/commands/seed.js';
import { loadConfig } from '../../src/config.js';
import { isAuditEventType } from '../../src/domain/audit/audit.js';
import { transactionalOf } from '../../src/eventstore/index.js';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { createHttpApp } from '../../src/http/app.js';
import type { TestDatabase } from './databases.js';
import { keysOf } from './keys.js';

export interface TestApp {
  readonly casebook: Casebook;
  readonly baseUrl: string;
  readonly authUrl: string;
  /** Moves the clock forward by `ms` milliseconds. */
  advance(ms: number): void;
  /**
   * Every event of `$all`, in order — without the audit trail's audit events unless
   * `audit` is true (a refused request writes an AuditEvent and nothing else).
   */
  allEvents(options?: { audit?: boolean }): Promise<RecordedEvent[]>;
  close(): Promise<void>;
}

/** Starts casebook on `database` with the clock at `start`. */
export const startTestApp = async (
  database: TestDatabase,
  options: {
    start?: Date;
    env?: Record<string, string>;
    realClock?: boolean;
    /** Collects every log line (pino JSON, level debug) the server writes, instead of none. */
    logLines?: string[];
  } = {},
): Promise<TestApp> => {
  const opened = await database.open();
  let now = (options.start ?? new Date('2026-03-01T10:00:00.000Z')).getTime();
  // The public URLs need the port, so listen first on a bare server, then attach the app.
  const bare: Server = createServer();
  bare.listen(0, '127.0.0.1');
  await once(bare, 'listening');
  const port = (bare.address() as AddressInfo).port;
  const config = loadConfig({
    ...options.env,
    PORT: String(port),
    DATA_DIR: 'memory://',
    LOG_LEVEL: 'silent',
  });
  const casebook = await openCasebook(config, {
    sql: opened.sql,
    keys: await keysOf(opened),
    // Workers that schedule by the clock (the subscription notifier's backoff) need real time.
    clock: options.realClock ? () => new Date() : () => new Date(now),
    logger: options.logLines
      ? pino({ level: 'debug' }, { write: (line: string) => options.logLines?.push(line) })
      : pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
  });
  bare.on('request', createHttpApp(casebook).callback());
  const baseUrl = `http://127.0.0.1:${port}`;
  return {
    casebook,
    baseUrl,
    authUrl: config.authUrl.replace('localhost', '127.0.0.1'),
    advance: (ms) => {
      now += ms;
    },
    allEvents: async (options = {}) => {
      const events: RecordedEvent[] = [];
      let from: RecordedEvent['position'] | undefined;
      for (;;) {
        // Every committed event, without $all's snapshot-xmin horizon: the test's own writes are
        // all acknowledged, and another process's long transaction on the same server (another
        // test run) must not hide them.
        // Through the store's own reading, so that encrypted data is read in the clear
        // (docs/architecture.md "Erasure").
        const page = await transactionalOf(casebook.store)!.readAllIn(
          casebook.sql,
          { ...(from ? { from } : {}), maxCount: 1000 },
          false,
        );
        if (page.length === 0) return events;
        events.push(...(options.audit ? page : page.filter((e) => !isAuditEventType(e.type))));
        from = page.at(-1)!.position;
      }
    },
    close: async () => {
      bare.closeAllConnections();
      bare.close();
      await casebook.close();
      await opened.dispose();
    },
  };
};

/** The standard seed of the HTTP tests: a regular and an EHR-managed tenant, each with a client. */
export const TEST_SEED: Seed = {
  tenants: [
    {
      name: 'General Hospital',
      ehr_managed: false,
      allowed_scopes: ['patient/*.*', 'user/*.*'],
      redirect_origins: ['https://ehr.example.org'],
      clients: [
        {
          client_id: 'ehr-backend',
          client_secret: 'general-secret-0123456789',
          scopes: ['system/*.*'],
          projects: ['radiology'],
        },
      ],
      questionnaires: [],
    },
    {
      name: 'Managed Clinic',
      ehr_managed: true,
      allowed_scopes: ['system/*.*', 'user/*.*', 'patient/*.*'],
      redirect_origins: [],
      clients: [
        {
          client_id: 'managed-ehr',
          client_secret: 'managed-secret-0123456789',
          scopes: ['system/*.*'],
          projects: ['cardiology'],
        },
      ],
      questionnaires: [],
    },
  ],
};

export const seed = (app: TestApp, s: Seed = TEST_SEED) => applySeed(app.casebook, s);

let seq = 0;
/** `prefix` made unique in this test process (a counter and a random tail): identifiers, names. */
export const unique = (prefix: string): string =>
  `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

/** `Authorization: Basic …` for a client. */
export const basic = (clientId: string, secret: string): string =>
  `Basic ${Buffer.from(`${clientId}:${secret}`).toString('base64')}`;

export const GENERAL = basic('ehr-backend', 'general-secret-0123456789');
export const MANAGED = basic('managed-ehr', 'managed-secret-0123456789');
