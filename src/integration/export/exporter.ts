/**
 * The report exporter (issue 6, issue 15; docs/architecture.md "Report export", role `export`):
 * follows the export outbox read model. A QuestionnaireResponse version entering it is rendered
 * ONCE as plain text ($generate-narrative) with the patient's and encounter's hospital identifiers
 * and recorded as ReportExportQueued (text, SHA-256, key `<installation>:qr-<id>-v<version>`);
 * every attempt sends exactly those bytes. Up to `concurrency` deliveries are in flight; each
 * version has its own retry schedule (exponential backoff with full jitter), so a stuck report
 * delays only itself. After `maxAttempts` attempts or `giveUpAfterMs` the version is
 * ReportExportAbandoned until `casebook export retry` requeues it. Delivery is at least once: a
 * crash after the sink accepted but before ReportExported is stored sends the same key and bytes
 * again. One active exporter per database, elected with a Postgres advisory lock.
 */

import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { v5 as uuidv5 } from 'uuid';
import type { AuditTrail } from '../../commands/audit.js';
import type { CommandContext } from '../../commands/context.js';
import { configureSink, decideBacklog, installationId } from '../../commands/export.js';
import { execute } from '../../commands/handler.js';
import type { Sql } from '../../db/sql.js';
import {
  type ExportCommand,
  exportDecider,
  exportKey,
  exportStatusOf,
  exportStream,
  legacyExportStatus,
  REPORT_EXPORT_QUEUED,
  type ReportExportQueuedData,
} from '../../domain/export/export.js';
import type { BacklogChoice } from '../../domain/export/export-sink.js';
import type { Content } from '../../domain/fhir/resource.js';
import { resourceStream } from '../../domain/fhir/resource.js';
import { newId } from '../../domain/ids.js';
import type { Actor, EventStore } from '../../eventstore/port.js';
import { referenceId } from '../../fhir/references.js';
import type { Metrics } from '../../metrics.js';
import { EXPORT_OUTBOX, type ReadModelNotices } from '../../queries/read-models.js';
import { readResource, searchResources } from '../../queries/resources.js';
import { generateNarrative } from '../../sdc/narrative.js';
import type { Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { jitteredBackoff, sleep } from '../delivery/schedule.js';
import { failureReason } from './outside-text.js';
import type { HospitalIdentifier, Report, Sink } from './sinks.js';

const EXPORTER_LOCK_KEY = `hashtext('casebook-export:' || current_schema())`;
const EVENT_NAMESPACE = '6f1c8f3e-2b7a-4d0e-9a51-3c1d2e4f5a60';
const ACTOR: Actor = { type: 'system', id: 'export' };

/** What the exporter needs of a Casebook. */
export interface ExporterDeps {
  readonly sql: Sql;
  readonly store: EventStore;
  readonly runner: ReadModelNotices;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** The audit trail: every delivery attempt is a disclosure and is recorded. */
  readonly audit?: AuditTrail;
  context(cause: { tenantId: number | null; actor: Actor }): CommandContext;
}

/** The backlog choice (EXPORT_BACKLOG or a `casebook export` flag) and where it came from. */
export interface BacklogDecision {
  readonly choice: BacklogChoice;
  readonly since?: string;
  readonly source: string;
}

export interface ExporterOptions {
  /** Identifier systems preferred for the patient and encounter numbers. */
  readonly patientSystem?: string | undefined;
  readonly encounterSystem?: string | undefined;
  /** How often due rows are looked for, milliseconds (default 1000). */
  readonly pollMs?: number;
  /** Deliveries in flight at most (EXPORT_CONCURRENCY, default 4). */
  readonly concurrency?: number;
  /** Ceiling of the first retry delay, doubled per failed attempt, ms (EXPORT_RETRY_BASE_MS, default 1000). */
  readonly retryBaseMs?: number;
  /** Cap of the retry delay ceiling, ms (EXPORT_RETRY_MAX_MS, default 5 minutes). */
  readonly retryMaxMs?: number;
  /** Attempts before a version is abandoned (EXPORT_MAX_ATTEMPTS, default 50). */
  readonly maxAttempts?: number;
  /** Time after queueing (or requeueing) after which a version is abandoned, ms (EXPORT_GIVE_UP_AFTER, default 24 h). */
  readonly giveUpAfterMs?: number;
  /** A version pending longer than this is a /readyz warning, ms (EXPORT_PENDING_WARN_AFTER, default 15 min). */
  readonly pendingWarnAfterMs?: number;
  /** The backlog choice to record when the store holds a backlog (EXPORT_BACKLOG or a CLI flag). */
  readonly backlog?: BacklogDecision | undefined;
  /** The exporter's clock (scheduling and event times); real time by default. */
  readonly now?: () => Date;
  /** Random numbers in [0, 1) for the jitter (tests pin it). */
  readonly random?: () => number;
}

interface OutboxRow {
  readonly tenantId: number;
  readonly responseId: number;
  readonly version: number;
  readonly attempts: number;
  /** Attempts made before the current round (a requeue starts a new one). */
  readonly roundAttempts: number;
  readonly roundStartedAt: Date | undefined;
}

/** What /readyz and /metrics report of the export. */
export interface ExportHealth {
  /** Report versions waiting for delivery (queued or not), and the age of the oldest, seconds. */
  readonly pending: number;
  readonly oldestPendingSeconds: number | null;
  /** Versions whose retrying ended (ReportExportAbandoned) and not requeued. */
  readonly abandoned: number;
  /** Versions older than the sink's configuration, held until a backlog choice. */
  readonly heldBacklog: number;
  /** Deliveries in flight in this process. */
  readonly inFlight: number;
  /** Readable warnings (a report pending too long, a held backlog, abandoned reports). */
  readonly warnings: readonly string[];
}

// Backoff and sleep are shared with the subscription notifier (integration/delivery/schedule.ts).
export { backoff, jitteredBackoff } from '../delivery/schedule.js';

/** Hex SHA-256 of the UTF-8 bytes of `text`. */
export const sha256Hex = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

/** `Type/<id>` (relative or absolute, possibly versioned reference) → id. */
const referencedId = (reference: unknown, type: string): number | undefined =>
  referenceId(reference, type, { absolute: true, version: true });

/** The identifier with `system`, else the first one with a value. */
const pickIdentifier = (resource: Content | undefined, system: string | undefined) => {
  const identifiers = Array.isArray(resource?.identifier) ? (resource.identifier as unknown[]) : [];
  const valid = identifiers.filter(
    (i): i is HospitalIdentifier =>
      !!i &&
      typeof i === 'object' &&
      typeof (i as { value?: unknown }).value === 'string' &&
      (i as { value: string }).value !== '',
  );
  const chosen = (system ? valid.find((i) => i.system === system) : undefined) ?? valid[0];
  return chosen
    ? { system: typeof chosen.system === 'string' ? chosen.system : '', value: chosen.value }
    : undefined;
};

const ONE_DAY_MS = 24 * 60 * 60_000;

export class Exporter {
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  /** Attempts recorded by this process that the outbox may not show yet (row key → attempts). */
  private readonly recorded = new Map<string, number>();
  /** Versions queued by this process that the outbox may not show yet. */
  private readonly queued = new Set<string>();
  /** Versions whose rendering failed, and when to try again (epoch ms). */
  private readonly renderRetry = new Map<string, number>();
  /** Deliveries in flight (row key → its promise). */
  private readonly inFlight = new Map<string, Promise<void>>();
  /** Wakes the loop (a delivery finished, a row was recorded). */
  private readonly wakers = new Set<() => void>();
  private woken = false;
  private installation: string | undefined;
  private readonly pollMs: number;
  private readonly concurrency: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly maxAttempts: number;
  private readonly giveUpAfterMs: number;
  private readonly pendingWarnAfterMs: number;
  private readonly now: () => Date;
  private readonly random: () => number;

  constructor(
    private readonly deps: ExporterDeps,
    private readonly sink: Sink,
    private readonly options: ExporterOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 1000;
    this.concurrency = Math.max(1, options.concurrency ?? 4);
    this.retryBaseMs = options.retryBaseMs ?? 1000;
    this.retryMaxMs = options.retryMaxMs ?? 5 * 60_000;
    this.maxAttempts = Math.max(1, options.maxAttempts ?? 50);
    this.giveUpAfterMs = options.giveUpAfterMs ?? ONE_DAY_MS;
    this.pendingWarnAfterMs = options.pendingWarnAfterMs ?? 15 * 60_000;
    this.now = options.now ?? (() => new Date());
    this.random = options.random ?? Math.random;
  }

  private context() {
    return this.deps.context({ tenantId: null, actor: ACTOR });
  }

  /**
   * Makes the exporter ready before it delivers (openCasebook awaits it): the installation id
   * (created once per store), the sink recorded in the log (ExportSinkConfigured when it is new:
   * what waits unqueued then is the backlog) and the backlog choice, when one is configured.
   * @returns the number of backlog report versions still held for a choice.
   */
  async prepare(): Promise<number> {
    this.installation = await installationId(this.context());
    const state = await configureSink(this.context(), this.sink.label);
    const held = await this.heldBacklog();
    if (held > 0 && !state.decided && this.options.backlog) {
      await decideBacklog(this.context(), this.options.backlog);
      return this.heldBacklog();
    }
    if (held > 0)
      this.deps.logger.warn(
        { held },
        'report versions older than the export sink configuration are held: choose EXPORT_BACKLOG=all|skip|since:<instant> (or casebook export --all, --skip-backlog, --since <instant>)',
      );
    return held;
  }

  /** Backlog report versions held for a choice. */
  async heldBacklog(): Promise<number> {
    const [row] = await this.deps.sql.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM rm_export_outbox WHERE backlog = 'held'`,
    );
    return Number(row?.n ?? 0);
  }

  /** Starts the exporter in the background: election, then following the outbox. */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    const { sql, logger } = this.deps;
    this.loop = sql
      .withConnection(async (conn) => {
        while (!abort.signal.aborted) {
          const [lock] = await conn.query<{ ok: boolean }>(
            `SELECT pg_try_advisory_lock(${EXPORTER_LOCK_KEY}) AS ok`,
          );
          if (lock?.ok) break;
          await sleep(2000, abort.signal);
        }
        if (abort.signal.aborted) return;
        try {
          await this.follow(abort.signal);
        } finally {
          await Promise.allSettled(this.inFlight.values());
          await conn.query(`SELECT pg_advisory_unlock(${EXPORTER_LOCK_KEY})`).catch(() => undefined);
        }
      })
      .catch((error: unknown) => {
        logger.error({ err: error }, 'report exporter stopped');
      });
  }

  /**
   * The outbox as /readyz and /metrics report it (never failing readiness: a slow hospital system
   * is a warning, not a reason to take casebook out of service).
   */
  async health(): Promise<ExportHealth> {
    const [row] = await this.deps.sql.query<{
      pending: string;
      abandoned: string;
      held: string;
      oldest: string | Date | null;
    }>(
      `SELECT count(*) FILTER (WHERE state IN ('pending', 'failed'))::text AS pending,
              count(*) FILTER (WHERE state = 'abandoned')::text AS abandoned,
              count(*) FILTER (WHERE backlog = 'held' AND state = 'pending')::text AS held,
              min(COALESCE(queued_at, created_at, next_attempt_at))
                FILTER (WHERE state IN ('pending', 'failed') AND backlog IS DISTINCT FROM 'held') AS oldest
         FROM rm_export_outbox`,
    );
    const pending = Number(row?.pending ?? 0);
    const abandoned = Number(row?.abandoned ?? 0);
    const heldBacklog = Number(row?.held ?? 0);
    const oldestMs = row?.oldest ? Math.max(0, this.now().getTime() - new Date(row.oldest).getTime()) : null;
    this.deps.metrics?.exportPending.set(pending);
    this.deps.metrics?.exportOldestPendingSeconds.set(oldestMs === null ? 0 : oldestMs / 1000);
    const warnings: string[] = [];
    if (oldestMs !== null && oldestMs > this.pendingWarnAfterMs)
      warnings.push(
        `a report has waited ${Math.round(oldestMs / 1000)} s for delivery (more than ${Math.round(this.pendingWarnAfterMs / 1000)} s)`,
      );
    if (abandoned > 0)
      warnings.push(`${abandoned} report version(s) abandoned: see casebook export retry --report <id>`);
    if (heldBacklog > 0)
      warnings.push(
        `${heldBacklog} report version(s) older than the export sink configuration are held: set EXPORT_BACKLOG`,
      );
    return {
      pending,
      oldestPendingSeconds: oldestMs === null ? null : Math.round(oldestMs / 1000),
      abandoned,
      heldBacklog,
      inFlight: this.inFlight.size,
      warnings,
    };
  }

  /** Stops the exporter and waits for the deliveries in flight. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    await Promise.allSettled(this.inFlight.values());
    this.loop = undefined;
  }

  private wake(): void {
    this.woken = true;
    for (const w of [...this.wakers]) w();
  }

  private async follow(signal: AbortSignal): Promise<void> {
    // New outbox rows wake the loop at once when the runner is in this process (an append that
    // changed no outbox row does not: it woke a pass of two queries per append under load); so
    // does a delivery that finished (a slot is free). A wake during a pass makes the next pass
    // start at once.
    const applied = this.deps.runner.applied$.subscribe({
      next: (names) => {
        if (!names || names.has(EXPORT_OUTBOX)) this.wake();
      },
    });
    const wake = (resolve: () => void) => {
      this.wakers.add(resolve);
      return () => this.wakers.delete(resolve);
    };
    try {
      while (!signal.aborted) {
        this.woken = false;
        try {
          await this.pump(signal);
        } catch (error) {
          if (signal.aborted) return;
          this.deps.logger.error({ err: error }, 'report export pass failed; retrying');
        }
        if (!this.woken) await sleep(this.pollMs, signal, wake);
      }
    } finally {
      applied.unsubscribe();
    }
  }

  /**
   * One pass: queues (renders once) the versions that entered the outbox, new reports before the
   * backlog, then starts due deliveries up to the concurrency limit without waiting for them.
   * @returns the number of deliveries started.
   */
  async pump(signal?: AbortSignal): Promise<number> {
    // One batch per pass: deliveries start while a large backlog is still being queued.
    if (!signal?.aborted && (await this.queueNew()) > 0) this.woken = true;
    return this.startDue(signal);
  }

  /**
   * Queues and delivers everything due now and waits for those deliveries (tests, `casebook export`).
   * @returns the number of deliveries made.
   */
  async exportDue(signal?: AbortSignal): Promise<number> {
    let started = 0;
    for (;;) {
      const now = await this.pump(signal);
      started += now;
      if (now === 0 && this.inFlight.size === 0) return started;
      await Promise.race(this.inFlight.values());
    }
  }

  private async queueNew(): Promise<number> {
    const rows = await this.deps.sql.query<{ tenant_id: number; response_id: number; version_id: number }>(
      `SELECT tenant_id, response_id, version_id FROM rm_export_outbox
        WHERE state IN ('pending', 'failed') AND sha256 IS NULL AND backlog IS DISTINCT FROM 'held'
        ORDER BY backlog IS NOT NULL, created_at, response_id, version_id LIMIT 50`,
    );
    let queued = 0;
    for (const r of rows) {
      const responseId = Number(r.response_id);
      const version = Number(r.version_id);
      const key = `${responseId}-v${version}`;
      if (this.queued.has(key) || (this.renderRetry.get(key) ?? 0) > Date.now()) continue;
      try {
        await this.queue(Number(r.tenant_id), responseId, version);
        this.queued.add(key);
        queued++;
      } catch (error) {
        // The version cannot be rendered (its resource is not readable): logged, tried in a minute.
        this.renderRetry.set(key, Date.now() + 60_000);
        this.deps.logger.error({ err: error, responseId, version }, 'report could not be queued for export');
      }
    }
    return queued;
  }

  /** Renders one version and records it as ReportExportQueued (the text every attempt sends). */
  private async queue(tenantId: number, responseId: number, version: number): Promise<void> {
    this.installation ??= await installationId(this.context());
    const installation = this.installation;
    const rendered = await this.render(tenantId, responseId, version);
    const data: ReportExportQueuedData = {
      responseId,
      version,
      key: exportKey(installation, responseId, version),
      installationId: installation,
      text: rendered.text,
      sha256: sha256Hex(rendered.text),
      byteLength: Buffer.byteLength(rendered.text, 'utf8'),
      ...(rendered.patientId !== undefined ? { patientId: rendered.patientId } : {}),
      ...(rendered.patientIdentifier ? { patientIdentifier: rendered.patientIdentifier } : {}),
      ...(rendered.encounterIdentifier ? { encounterIdentifier: rendered.encounterIdentifier } : {}),
      ...(rendered.authored ? { authored: rendered.authored } : {}),
      status: rendered.status,
      at: this.now().toISOString(),
    };
    await this.record(tenantId, { type: 'QueueExport', data }, `${responseId}-v${version}:queued`);
  }

  private async startDue(signal?: AbortSignal): Promise<number> {
    const free = this.concurrency - this.inFlight.size;
    if (free <= 0) return 0;
    const rows = await this.deps.sql.query<{
      tenant_id: number;
      response_id: number;
      version_id: number;
      attempts: number;
      round_attempts: number;
      round_started_at: string | Date | null;
    }>(
      `SELECT tenant_id, response_id, version_id, attempts, round_attempts, round_started_at FROM rm_export_outbox
        WHERE state IN ('pending', 'failed') AND sha256 IS NOT NULL AND next_attempt_at <= $1
        ORDER BY backlog IS NOT NULL, next_attempt_at, response_id, version_id LIMIT $2`,
      [this.now().toISOString(), free + this.inFlight.size],
    );
    let started = 0;
    for (const r of rows) {
      if (signal?.aborted || this.inFlight.size >= this.concurrency) break;
      const row: OutboxRow = {
        tenantId: Number(r.tenant_id),
        responseId: Number(r.response_id),
        version: Number(r.version_id),
        attempts: Number(r.attempts),
        roundAttempts: Number(r.round_attempts),
        roundStartedAt: r.round_started_at ? new Date(r.round_started_at) : undefined,
      };
      const key = `${row.responseId}-v${row.version}`;
      if (this.inFlight.has(key)) continue;
      // Recorded here but not yet projected: not due again.
      if ((this.recorded.get(key) ?? 0) > row.attempts) continue;
      this.recorded.delete(key);
      const delivery = this.deliverOne(row)
        .catch((error: unknown) =>
          this.deps.logger.error(
            { err: error, responseId: row.responseId, version: row.version },
            'recording a report export outcome failed; retried on the next pass',
          ),
        )
        .finally(() => {
          this.inFlight.delete(key);
          this.wake();
        });
      this.inFlight.set(key, delivery);
      started++;
    }
    return started;
  }

  /** The queued report of a version, exactly as recorded (the last ReportExportQueued of it). */
  private async queuedReport(row: OutboxRow): Promise<ReportExportQueuedData> {
    const events = await this.deps.store.readStream(exportStream(row.responseId));
    const queued = events
      .filter((e) => e.type === REPORT_EXPORT_QUEUED && !e.erased)
      .map((e) => e.data as ReportExportQueuedData)
      .find((d) => d.version === row.version);
    if (!queued) throw new Error(`QuestionnaireResponse/${row.responseId} v${row.version} was never queued`);
    return queued;
  }

  private async deliverOne(row: OutboxRow): Promise<void> {
    const attempt = row.attempts + 1;
    const key = `${row.responseId}-v${row.version}`;
    const { logger, metrics } = this.deps;
    const queued = await this.queuedReport(row);
    const report: Report = {
      text: queued.text,
      idempotencyKey: queued.key,
      patientIdentifier: queued.patientIdentifier,
      encounterIdentifier: queued.encounterIdentifier,
      responseId: row.responseId,
      version: row.version,
      authored: queued.authored,
      queuedAt: queued.at,
      status: queued.status ?? legacyExportStatus(row.version),
    };
    metrics?.exportAttempts.inc({ sink: this.sink.label });
    let command: ExportCommand;
    let outcome: 'delivered' | 'failed' | 'abandoned';
    try {
      await this.sink.deliver(report, this.abort?.signal);
      outcome = 'delivered';
      command = {
        type: 'RecordDelivery',
        data: {
          responseId: row.responseId,
          version: row.version,
          sink: this.sink.label,
          attempt,
          key: queued.key,
          sha256: queued.sha256,
          at: this.now().toISOString(),
        },
      };
      logger.info({ responseId: row.responseId, version: row.version, attempt }, 'report exported');
    } catch (error) {
      // Stopping, not failing: the attempt is neither a failure nor counted; the next process sends it.
      if (this.abort?.signal.aborted) return;
      const now = this.now();
      const reason = failureReason(error, this.sink.label);
      const inRound = attempt - row.roundAttempts;
      const since = row.roundStartedAt ?? new Date(queued.at);
      const overdue = now.getTime() - since.getTime() >= this.giveUpAfterMs;
      const abandon =
        inRound >= this.maxAttempts
          ? `gave up after ${inRound} attempt${inRound === 1 ? '' : 's'}; last error: ${reason}`
          : overdue
            ? `gave up after ${Math.round(this.giveUpAfterMs / 1000)} s of attempts; last error: ${reason}`
            : undefined;
      outcome = abandon ? 'abandoned' : 'failed';
      const nextAttemptAt = new Date(
        now.getTime() + jitteredBackoff(attempt, this.retryBaseMs, this.retryMaxMs, this.random),
      ).toISOString();
      command = {
        type: 'RecordFailure',
        data: {
          responseId: row.responseId,
          version: row.version,
          attempt,
          error: reason,
          nextAttemptAt,
          at: now.toISOString(),
        },
        ...(abandon ? { abandon } : {}),
      };
      // The raw error (a path, a stack) only in the log; the event holds the sanitised reason.
      logger.warn(
        {
          responseId: row.responseId,
          version: row.version,
          attempt,
          err: error,
          reason,
          nextAttemptAt,
          abandon,
        },
        abandon ? 'report export abandoned' : 'report export failed',
      );
    }
    await this.record(row.tenantId, command, `${key}:${attempt}:${command.type}`);
    metrics?.exportDeliveries.inc({ outcome, sink: this.sink.label });
    // Until the outbox shows this attempt (async read models), the row is not due again.
    this.recorded.set(key, attempt);
    const response = await readResource(this.deps.sql, 'QuestionnaireResponse', row.responseId, row.tenantId);
    await this.deps.audit?.record({
      id: newId(),
      tenantId: row.tenantId,
      interaction: 'report-export',
      action: 'E',
      recorded: this.now().toISOString(),
      status: outcome === 'delivered' ? 200 : 502,
      agent: { kind: 'system', name: 'export' },
      entities: [
        { reference: `QuestionnaireResponse/${row.responseId}`, patientId: response?.patientId ?? null },
      ],
    });
  }

  /** Appends the decision on the response's export stream; a command id derived from it makes a repeat a no-op. */
  private async record(tenantId: number, command: ExportCommand, id: string): Promise<void> {
    const ctx = this.deps.context({ tenantId, actor: ACTOR });
    await execute(ctx, (uow) => uow.decide(exportStream(command.data.responseId), exportDecider, command), {
      commandId: uuidv5(id, EVENT_NAMESPACE),
    });
  }

  /** The report of one response version: its plain-text narrative and hospital identifiers. */
  private async render(tenantId: number, responseId: number, version: number) {
    const { sql, store } = this.deps;
    const recorded = await store.readStream(resourceStream('QuestionnaireResponse', responseId), {
      fromRevision: BigInt(version - 1),
      maxCount: 1,
    });
    const content = recorded.find((e) => Number(e.revision) === version - 1)?.data as
      | { resource?: Content }
      | undefined;
    let resource = content?.resource;
    if (!resource) {
      const current = await readResource(sql, 'QuestionnaireResponse', responseId, tenantId);
      if (!current || current.versionId !== version)
        throw new Error(`QuestionnaireResponse/${responseId} version ${version} not found`);
      resource = current.resource;
    }
    const questionnaire = await this.questionnaire(tenantId, resource.questionnaire);
    const { text } = generateNarrative(resource as unknown as QuestionnaireResponse, questionnaire);
    const patientId = referencedId(resource.subject, 'Patient');
    const encounterId = referencedId(resource.encounter, 'Encounter');
    const patient =
      patientId !== undefined ? await readResource(sql, 'Patient', patientId, tenantId) : undefined;
    const encounter =
      encounterId !== undefined ? await readResource(sql, 'Encounter', encounterId, tenantId) : undefined;
    return {
      text,
      patientId,
      patientIdentifier: pickIdentifier(patient?.resource, this.options.patientSystem),
      encounterIdentifier: pickIdentifier(encounter?.resource, this.options.encounterSystem),
      authored: typeof resource.authored === 'string' ? resource.authored : undefined,
      status: exportStatusOf(resource.status),
    };
  }

  /** The Questionnaire a response answers (`url` or `url|version`), newest version when unversioned. */
  private async questionnaire(tenantId: number, canonical: unknown): Promise<Questionnaire | undefined> {
    if (typeof canonical !== 'string' || canonical === '') return undefined;
    const bar = canonical.indexOf('|');
    const url = bar < 0 ? canonical : canonical.slice(0, bar);
    const version = bar < 0 ? undefined : canonical.slice(bar + 1);
    const rows = await searchResources(this.deps.sql, 'Questionnaire', tenantId, {
      elements: [
        { element: 'url', values: [url] },
        ...(version ? [{ element: 'version', values: [version] }] : []),
      ],
      limit: 100,
    });
    const newest = rows.sort((a, b) =>
      String(b.resource.version ?? '').localeCompare(String(a.resource.version ?? ''), undefined, {
        numeric: true,
      }),
    )[0];
    return newest?.resource as Questionnaire | undefined;
  }
}
