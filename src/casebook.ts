/**
 * The composition root: opens the read-model database, the event store and the projection runner
 * from the configuration (docs/architecture.md), and hands out command contexts.
 */
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import { v4 as uuidv4 } from 'uuid';
import { type BackgroundSealer, BackgroundThread } from './background/thread.js';
import { AuditTrail } from './commands/audit.js';
import type { CommandContext } from './commands/context.js';
import { CredentialGuard, migrateCredentialFailures } from './commands/credential-guard.js';
import { completeErasures } from './commands/erasure.js';
import { type IdentifierNaming, openIdentifierNaming, UNKEYED_NAMING } from './commands/identifier-naming.js';
import type { Config } from './config.js';
import { migrateSequences } from './db/sequences.js';
import { PgliteSql, PostgresSql, type Sql } from './db/sql.js';
import { StatisticsKeeper } from './db/statistics.js';
import { openEventStore } from './eventstore/index.js';
import type { Actor, EventStore } from './eventstore/port.js';
import { migrateSeals } from './eventstore/seal.js';
import { Sealer } from './eventstore/sealer.js';
import { shreddingCodec } from './eventstore/shredding/codec.js';
import { type KeyStore, loadKek, openKeyStore } from './eventstore/shredding/index.js';
import { createsPhiSubject, phiSubjectOf } from './fhir/phi.js';
import { type BacklogDecision, Exporter } from './integration/export/exporter.js';
import { openSink } from './integration/export/sinks.js';
import { SubscriptionNotifier } from './integration/subscriptions/notifier.js';
import { createMetrics, type Metrics } from './metrics.js';
import { allProjections } from './projections/index.js';
import { ProjectionRunner, ReadModelUnavailable } from './projections/runner/index.js';
import { ApiClientDirectory } from './queries/api-clients.js';

export interface Casebook {
  readonly config: Config;
  readonly sql: Sql;
  readonly store: EventStore;
  readonly runner: ProjectionRunner;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** The audit trail's writer (group commit). */
  readonly audit: AuditTrail;
  /** API clients as requests authenticate them (cached briefly, dropped on a change). */
  readonly clients: ApiClientDirectory;
  /** Checks client secrets, bounded under a flood of wrong ones (src/commands/credential-guard.ts). */
  readonly credentials: CredentialGuard;
  /**
   * The sealer of the tamper-evident log, when this process runs it (`serve` unless --no-seal): in
   * a worker thread on PostgreSQL, in this thread on PGlite and KurrentDB.
   */
  readonly sealer: BackgroundSealer | undefined;
  /** The report exporter, when EXPORT_SINK is set and this process runs it. */
  readonly exporter: Exporter | undefined;
  /** The subscription notifier (issue 37), unless this process does not run it. */
  readonly notifier: SubscriptionNotifier | undefined;
  /** The data keys of crypto-shredding (docs/architecture.md "Erasure"). */
  readonly keys: KeyStore;
  /** The clock every command reads its `now` from (tests move it). */
  readonly clock: () => Date;
  /** A command context for a cause (tenant, actor, request). */
  context(cause: {
    tenantId: number | null;
    actor: Actor;
    requestId?: string | null;
    correlationId?: string;
  }): CommandContext;
  close(): Promise<void>;
}

export interface OpenOptions {
  /** Use this database instead of the configured one (tests); it is closed with the Casebook. */
  readonly sql?: Sql;
  readonly clock?: () => Date;
  readonly logger?: Logger;
  /**
   * Bring building read models up to date before returning, and keep building them in the
   * background (default true). Live read models are applied by every append either way.
   */
  readonly project?: boolean;
  /** Seal the log in the background in this process (docs/architecture.md "Tamper-evident log"; default false). */
  readonly seal?: boolean;
  /**
   * On PostgreSQL, run the sealer and the deferred projections' follower in a background thread
   * (docs/architecture.md "Background thread"; `serve`; default false: in this thread).
   */
  readonly background?: boolean;
  /** Run the subscription notifier in this process (default true; one process per database delivers). */
  readonly subscriptions?: boolean;
  /** Run the report exporter in this process when EXPORT_SINK is set (default true). */
  readonly export?: boolean;
  /** The backlog choice of `casebook export --all | --skip-backlog | --since` (overrides EXPORT_BACKLOG). */
  readonly backlog?: BacklogDecision;
  /**
   * The key store to use instead of the configured one, left open at close (tests: one per test
   * database, so that a process started again on it reads what the last one wrote;
   * docs/architecture.md "Erasure").
   */
  readonly keys?: KeyStore;
}

const processAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/**
 * Takes `<dataDir>/casebook.pid`: PGlite is one in-process connection, so two processes must never
 * open the same data directory. A lock left by a dead process is taken over.
 * @throws {Error} when a live process holds the directory.
 */
export const lockDataDir = (dataDir: string): (() => void) => {
  const file = join(dataDir, 'casebook.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => rmSync(file, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number(readFileSync(file, 'utf8').trim());
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && processAlive(holder))
        throw new Error(
          `the embedded database in ${dataDir} is in use by process ${holder}: stop it first, or use a Postgres server (DATABASE_URL)`,
        );
      rmSync(file, { force: true });
    }
  }
  throw new Error(`cannot lock ${dataDir}`);
};

/**
 * Opens the read-model database named by the configuration: Postgres when DATABASE_URL is set,
 * else PGlite in DATA_DIR (locked to this process) or in memory for `memory://`.
 * @throws {Error} when the embedded data directory is held by another live process.
 */
export const openDatabase = async (config: Config): Promise<Sql> => {
  if (config.databaseUrl) return new PostgresSql(config.databaseUrl);
  if (config.dataDir === 'memory://') return PgliteSql.open();
  mkdirSync(config.dataDir, { recursive: true });
  const unlock = lockDataDir(config.dataDir);
  try {
    const sql = await PgliteSql.open(config.dataDir);
    const close = sql.close.bind(sql);
    sql.close = async () => {
      await close();
      unlock();
    };
    return sql;
  } catch (error) {
    unlock();
    throw error;
  }
};

/**
 * Opens casebook: database, event store, migrations, projection runner (started unless
 * `project: false`).
 * @throws {Error} when a database or KurrentDB cannot be reached.
 */
export const openCasebook = async (config: Config, options: OpenOptions = {}): Promise<Casebook> => {
  const logger = options.logger ?? pino({ level: config.logLevel });
  // The KEK first: a server on PostgreSQL without one refuses to start before it opens anything.
  const kek = options.keys
    ? undefined
    : loadKek({
        kek: config.keys.kek,
        kekFile: config.keys.kekFile,
        dataDir: config.dataDir,
        databaseUrl: config.databaseUrl,
        keyStoreUrl: config.keys.storeUrl,
      });
  if (kek?.made)
    logger.warn(
      { path: kek.made },
      'made a key-encryption key for the embedded store; back it up apart from the data directory (docs/architecture.md "Erasure")',
    );
  const sql = options.sql ?? (await openDatabase(config));
  const keys =
    options.keys ??
    (await openKeyStore(
      {
        dataDir: config.dataDir,
        databaseUrl: config.databaseUrl,
        keyStoreUrl: config.keys.storeUrl,
        keyStoreSchema: config.keys.storeSchema,
        logSharesDatabase: !config.kurrentDbUrl,
      },
      kek!.kek,
      sql,
    ));
  const store = await openEventStore({
    sql,
    codec: shreddingCodec(keys, phiSubjectOf, createsPhiSubject),
    ...(config.kurrentDbUrl ? { kurrentDbUrl: config.kurrentDbUrl } : {}),
  });
  await migrateSequences(sql);
  await migrateCredentialFailures(sql);
  const clock = options.clock ?? (() => new Date());
  const runner = new ProjectionRunner(store, sql, allProjections, logger, { clock });
  await runner.migrate();
  if (options.seal) await migrateSeals(sql);
  // On PostgreSQL, a serving process seals the log, follows it for the deferred projections and
  // keeps the planner statistics in its background thread, with its own pool on the same schema (docs/architecture.md "Background
  // thread"). PGlite is one in-process connection, and KurrentDB's sealer needs both stores: there
  // they run in this thread.
  const inThread = options.background === true && sql instanceof PostgresSql && !config.kurrentDbUrl;
  const followElsewhere = inThread && options.project !== false && runner.mode === 'inline';
  let thread: BackgroundThread | undefined;
  if (inThread) {
    thread = new BackgroundThread(
      {
        ...sql.target,
        logLevel: config.logLevel,
        seal: options.seal === true,
        followDeferred: followElsewhere,
        keepStatistics: true,
      },
      logger,
      (name, position) => runner.noteDeferredApplied(name, position),
    );
    if (followElsewhere) runner.followDeferredElsewhere(() => thread?.hurry());
  }
  // Planner statistics of casebook's tables, where autovacuum does not keep them (src/db/statistics.ts).
  const keeper = options.background === true && !inThread ? new StatisticsKeeper(sql, logger) : undefined;
  keeper?.start();
  if (options.project !== false) {
    await runner.catchUp();
    runner.start();
    // An erasure cut short between its event and its key completes now (docs/architecture.md "Erasure").
    const completed = await completeErasures(sql, keys);
    if (completed > 0)
      logger.warn({ completed }, 'completed erasures cut short: their data keys are destroyed');
  }
  thread?.start();
  let exporter: Exporter | undefined;
  let notifier: SubscriptionNotifier | undefined;
  let sealer: BackgroundSealer | undefined;
  if (options.seal) {
    if (thread) sealer = thread;
    else {
      const inProcess = new Sealer(store, sql, logger);
      inProcess.start();
      sealer = inProcess;
    }
  }
  const metrics = createMetrics();
  let audit: AuditTrail | undefined;
  const clients = new ApiClientDirectory(sql);
  // How identifier reservation streams are named; decided below, before anything is appended.
  let identifiers: IdentifierNaming = UNKEYED_NAMING;
  const casebook: Casebook = {
    config,
    sql,
    store,
    runner,
    logger,
    metrics,
    clients,
    credentials: new CredentialGuard({
      onCheck: (result) => metrics.clientSecretChecks.inc({ result }),
      onHash: () => metrics.clientSecretHashes.inc(),
      now: () => clock().getTime(),
      sql,
    }),
    get audit() {
      audit ??= new AuditTrail(() =>
        casebook.context({ tenantId: null, actor: { type: 'system', id: 'audit' } }),
      );
      return audit;
    },
    sealer,
    get exporter() {
      return exporter;
    },
    get notifier() {
      return notifier;
    },
    clock,
    keys,
    context: (cause) => ({
      store,
      sql,
      tenantId: cause.tenantId,
      actor: cause.actor,
      correlationId: cause.correlationId ?? cause.requestId ?? uuidv4(),
      causationId: cause.requestId ?? null,
      requestId: cause.requestId ?? null,
      now: clock(),
      onConflict: () => metrics.appendConflicts.inc(),
      identifiers,
      afterAppend: async (position, events) => {
        metrics.appends.inc();
        metrics.appendedEvents.inc(events.length);
        clients.noteAppended(events.map((e) => e.type));
        if (runner.mode === 'async' && !(await runner.waitFor(position)))
          logger.warn({ position: String(position.commit) }, 'read models did not reach a write within 5 s');
        const stopped = runner.stoppedByEvents(events.map((e) => e.id));
        if (stopped)
          throw new ReadModelUnavailable(
            stopped,
            true,
            `the change was recorded, but the read model ${stopped} stopped on it (see /readyz); it shows once the read model is rebuilt`,
          );
      },
    }),
    close: async () => {
      await exporter?.stop();
      await notifier?.stop();
      await (thread ?? sealer)?.stop();
      await keeper?.stop();
      await audit?.drain();
      await runner.stop();
      await store.close();
      if (!options.keys) await keys.close();
      await sql.close();
    },
  };
  identifiers = await openIdentifierNaming(
    casebook.context({ tenantId: null, actor: { type: 'system', id: 'casebook' } }),
    keys,
  );
  if (config.launcher.allowUnsigned)
    logger.warn(
      'LAUNCHER_ALLOW_UNSIGNED=true: unsigned launch links are accepted (loopback only); never in production',
    );
  if (config.exportSink && options.export !== false) {
    const x = config.export;
    exporter = new Exporter(casebook, openSink(config.exportSink, { timeoutMs: x.timeoutMs }), {
      patientSystem: config.launcher.patientSystem,
      encounterSystem: config.launcher.encounterSystem,
      concurrency: x.concurrency,
      retryBaseMs: x.retryBaseMs,
      retryMaxMs: x.retryMaxMs,
      maxAttempts: x.maxAttempts,
      giveUpAfterMs: x.giveUpAfterMs,
      pendingWarnAfterMs: x.pendingWarnAfterMs,
      backlog: options.backlog ?? (x.backlog ? { ...x.backlog, source: 'EXPORT_BACKLOG' } : undefined),
    });
    await exporter.prepare();
    exporter.start();
  }
  if (options.subscriptions !== false && options.project !== false) {
    const s = config.subscriptions;
    notifier = new SubscriptionNotifier(casebook, {
      base: config.fhirUrl,
      allowedOrigins: s.allowedOrigins,
      concurrency: s.concurrency,
      timeoutMs: s.timeoutMs,
      retryBaseMs: s.retryBaseMs,
      retryMaxMs: s.retryMaxMs,
      errorAfterMs: s.errorAfterMs,
      pollMs: s.pollMs,
      now: clock,
    });
    await notifier.migrate();
    notifier.start();
  }
  return casebook;
};
