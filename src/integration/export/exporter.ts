/**
 * The report exporter (issue 6, docs/architecture.md "Processes and hosts", role `export`): follows the export outbox read model,
 * renders each due QuestionnaireResponse version as plain text ($generate-narrative), delivers it
 * with the patient's and encounter's hospital identifiers to the sink, and records
 * ReportExported / ReportExportFailed. Failures are retried with exponential backoff; since the
 * outbox is built from the event log, nothing is lost across sink outages or restarts. One active
 * exporter per database, elected with a Postgres advisory lock.
 */
import type { Logger } from 'pino';
import { v4 as uuidv4, v5 as uuidv5 } from 'uuid';
import type { AuditTrail } from '../../commands/audit.js';
import type { CommandContext } from '../../commands/context.js';
import { execute } from '../../commands/handler.js';
import type { Sql } from '../../db/sql.js';
import {
  exportDecider,
  exportStream,
  REPORT_EXPORT_FAILED,
  REPORT_EXPORTED,
  type ReportExportedData,
  type ReportExportFailedData,
} from '../../domain/export/export.js';
import type { Content } from '../../domain/fhir/resource.js';
import { resourceStream } from '../../domain/fhir/resource.js';
import type { Actor, EventStore } from '../../eventstore/port.js';
import type { Metrics } from '../../metrics.js';
import { readResource, searchResources } from '../../projections/resources.js';
import type { ProjectionRunner } from '../../projections/runner.js';
import { generateNarrative } from '../../sdc/narrative.js';
import type { Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { deliveryError } from './sanitize.js';
import type { HospitalIdentifier, Sink } from './sinks.js';

const EXPORTER_LOCK_KEY = `hashtext('casebook-export:' || current_schema())`;
const EVENT_NAMESPACE = '6f1c8f3e-2b7a-4d0e-9a51-3c1d2e4f5a60';
const ACTOR: Actor = { type: 'system', id: 'export' };

/** What the exporter needs of a Casebook. */
export interface ExporterDeps {
  readonly sql: Sql;
  readonly store: EventStore;
  readonly runner: ProjectionRunner;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** The audit trail: every delivery attempt is a disclosure and is recorded. */
  readonly audit?: AuditTrail;
  context(cause: { tenantId: number | null; actor: Actor }): CommandContext;
}

export interface ExporterOptions {
  /** Identifier systems preferred for the patient and encounter numbers. */
  readonly patientSystem?: string | undefined;
  readonly encounterSystem?: string | undefined;
  /** How often due rows are looked for, milliseconds (default 1000). */
  readonly pollMs?: number;
  /** First retry delay, doubled per failed attempt (default 1000). */
  readonly retryBaseMs?: number;
  /** Cap of the retry delay (default 5 minutes). */
  readonly retryMaxMs?: number;
  /** The exporter's clock (scheduling and event times); real time by default. */
  readonly now?: () => Date;
}

interface OutboxRow {
  readonly tenantId: number;
  readonly responseId: number;
  readonly version: number;
  readonly attempts: number;
}

const sleep = (ms: number, signal: AbortSignal, wake?: (resolve: () => void) => () => void) =>
  new Promise<void>((resolve) => {
    let unwake = () => {};
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      unwake();
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    if (wake) unwake = wake(done);
  });

/** Delay before attempt `failed + 1` after `failed` failures: base · 2^(failed-1), capped. */
export const backoff = (failed: number, baseMs: number, maxMs: number): number =>
  Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(failed - 1, 30)));

/** `Type/<id>` (relative or absolute reference) → id. */
const referencedId = (reference: unknown, type: string): number | undefined => {
  if (!reference || typeof reference !== 'object') return undefined;
  const ref = (reference as { reference?: unknown }).reference;
  if (typeof ref !== 'string') return undefined;
  const match = new RegExp(`(?:^|/)${type}/(\\d+)(?:/_history/\\d+)?$`).exec(ref);
  return match ? Number(match[1]) : undefined;
};

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

export class Exporter {
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  /** Attempts recorded by this process that the outbox may not show yet (key → attempts). */
  private readonly recorded = new Map<string, number>();
  private readonly pollMs: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly now: () => Date;

  constructor(
    private readonly deps: ExporterDeps,
    private readonly sink: Sink,
    private readonly options: ExporterOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 1000;
    this.retryBaseMs = options.retryBaseMs ?? 1000;
    this.retryMaxMs = options.retryMaxMs ?? 5 * 60_000;
    this.now = options.now ?? (() => new Date());
  }

  /** Starts the exporter in the background: election, then polling the outbox. */
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
          await conn.query(`SELECT pg_advisory_unlock(${EXPORTER_LOCK_KEY})`).catch(() => undefined);
        }
      })
      .catch((error: unknown) => {
        logger.error({ err: error }, 'report exporter stopped');
      });
  }

  /**
   * The outbox as /readyz and /metrics report it: report versions not yet delivered and the age of
   * the oldest, seconds.
   */
  async health(): Promise<{ pending: number; oldestPendingSeconds: number | null }> {
    const [row] = await this.deps.sql.query<{ pending: string; oldest: string | Date | null }>(
      `SELECT count(*)::text AS pending, min(next_attempt_at) AS oldest FROM rm_export_outbox
        WHERE state IN ('pending', 'failed')`,
    );
    const pending = Number(row?.pending ?? 0);
    const oldest = row?.oldest ? (this.now().getTime() - new Date(row.oldest).getTime()) / 1000 : null;
    this.deps.metrics?.exportPending.set(pending);
    this.deps.metrics?.exportOldestPendingSeconds.set(oldest ?? 0);
    return { pending, oldestPendingSeconds: oldest === null ? null : Math.max(0, Math.round(oldest)) };
  }

  /** Stops the exporter and waits for the delivery in progress. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    this.loop = undefined;
  }

  private async follow(signal: AbortSignal): Promise<void> {
    // New outbox rows wake the loop at once when the runner is in this process.
    const wake = (resolve: () => void) => {
      const subscription = this.deps.runner.applied$.subscribe({ next: () => resolve() });
      return () => subscription.unsubscribe();
    };
    while (!signal.aborted) {
      try {
        while (!signal.aborted && (await this.exportDue(signal)) > 0) {}
      } catch (error) {
        if (signal.aborted) return;
        this.deps.logger.error({ err: error }, 'report export pass failed; retrying');
      }
      await sleep(this.pollMs, signal, wake);
    }
  }

  /**
   * Exports every due row once (`casebook export` loop body; tests call it directly).
   * @returns the number of rows attempted.
   */
  async exportDue(signal?: AbortSignal): Promise<number> {
    const rows = await this.deps.sql.query<{
      tenant_id: number;
      response_id: number;
      version_id: number;
      attempts: number;
    }>(
      `SELECT tenant_id, response_id, version_id, attempts FROM rm_export_outbox
       WHERE state IN ('pending', 'failed') AND next_attempt_at <= $1
       ORDER BY next_attempt_at, response_id, version_id LIMIT 50`,
      [this.now().toISOString()],
    );
    let attempted = 0;
    for (const r of rows) {
      if (signal?.aborted) break;
      const row: OutboxRow = {
        tenantId: Number(r.tenant_id),
        responseId: Number(r.response_id),
        version: Number(r.version_id),
        attempts: Number(r.attempts),
      };
      const key = `${row.responseId}-v${row.version}`;
      // Recorded here but not yet projected: not due again.
      if ((this.recorded.get(key) ?? 0) > row.attempts) continue;
      this.recorded.delete(key);
      await this.exportOne(row);
      attempted++;
    }
    return attempted;
  }

  private async exportOne(row: OutboxRow): Promise<void> {
    const attempt = row.attempts + 1;
    const key = `${row.responseId}-v${row.version}`;
    let event: { type: string; data: ReportExportedData | ReportExportFailedData };
    this.deps.metrics?.exportAttempts.inc({ sink: this.sink.label });
    try {
      const report = await this.render(row);
      await this.sink.deliver(report);
      const at = this.now().toISOString();
      event = {
        type: REPORT_EXPORTED,
        data: { responseId: row.responseId, version: row.version, sink: this.sink.label, attempt, at },
      };
      this.deps.logger.info({ responseId: row.responseId, version: row.version, attempt }, 'report exported');
      this.deps.metrics?.exportDeliveries.inc({ outcome: 'delivered', sink: this.sink.label });
    } catch (error) {
      const now = this.now();
      // Outside text, sanitised: no control characters, no paths (the process log has the detail).
      const message = deliveryError(error);
      this.deps.metrics?.exportDeliveries.inc({ outcome: 'failed', sink: this.sink.label });
      const nextAttemptAt = new Date(
        now.getTime() + backoff(attempt, this.retryBaseMs, this.retryMaxMs),
      ).toISOString();
      event = {
        type: REPORT_EXPORT_FAILED,
        data: {
          responseId: row.responseId,
          version: row.version,
          attempt,
          error: message,
          nextAttemptAt,
          at: now.toISOString(),
        },
      };
      this.deps.logger.warn(
        {
          responseId: row.responseId,
          version: row.version,
          attempt,
          error: message,
          err: error,
          nextAttemptAt,
        },
        'report export failed',
      );
    }
    const ctx = this.deps.context({ tenantId: row.tenantId, actor: ACTOR });
    // A command id derived from the outcome: the same outcome recorded twice is one event.
    await execute(
      ctx,
      (uow) =>
        uow.decide(
          exportStream(row.responseId),
          exportDecider,
          event.type === REPORT_EXPORTED
            ? { type: 'RecordDelivery', data: event.data as ReportExportedData }
            : { type: 'RecordFailure', data: event.data as ReportExportFailedData },
        ),
      { commandId: uuidv5(`${key}:${attempt}:${event.type}`, EVENT_NAMESPACE) },
    );
    // Until the outbox shows this attempt (async read models), the row is not due again.
    this.recorded.set(key, attempt);
    const response = await readResource(this.deps.sql, 'QuestionnaireResponse', row.responseId, row.tenantId);
    await this.deps.audit?.record({
      id: uuidv4(),
      tenantId: row.tenantId,
      interaction: 'report-export',
      action: 'E',
      recorded: this.now().toISOString(),
      status: event.type === REPORT_EXPORTED ? 200 : 502,
      agent: { kind: 'system', name: 'export' },
      entities: [
        { reference: `QuestionnaireResponse/${row.responseId}`, patientId: response?.patientId ?? null },
      ],
    });
  }

  /** The report of one response version: its plain-text narrative and hospital identifiers. */
  private async render(row: OutboxRow) {
    const { sql, store } = this.deps;
    const recorded = await store.readStream(resourceStream('QuestionnaireResponse', row.responseId), {
      fromRevision: BigInt(row.version - 1),
      maxCount: 1,
    });
    const content = recorded.find((e) => Number(e.revision) === row.version - 1)?.data as
      | { resource?: Content }
      | undefined;
    let resource = content?.resource;
    if (!resource) {
      const current = await readResource(sql, 'QuestionnaireResponse', row.responseId, row.tenantId);
      if (!current || current.versionId !== row.version)
        throw new Error(`QuestionnaireResponse/${row.responseId} version ${row.version} not found`);
      resource = current.resource;
    }
    const questionnaire = await this.questionnaire(row.tenantId, resource.questionnaire);
    const { text } = generateNarrative(resource as unknown as QuestionnaireResponse, questionnaire);
    const patientId = referencedId(resource.subject, 'Patient');
    const encounterId = referencedId(resource.encounter, 'Encounter');
    const patient =
      patientId !== undefined ? await readResource(sql, 'Patient', patientId, row.tenantId) : undefined;
    const encounter =
      encounterId !== undefined ? await readResource(sql, 'Encounter', encounterId, row.tenantId) : undefined;
    return {
      text,
      idempotencyKey: `qr-${row.responseId}-v${row.version}`,
      patientIdentifier: pickIdentifier(patient?.resource, this.options.patientSystem),
      encounterIdentifier: pickIdentifier(encounter?.resource, this.options.encounterSystem),
      responseId: row.responseId,
      version: row.version,
      authored: typeof resource.authored === 'string' ? resource.authored : undefined,
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
