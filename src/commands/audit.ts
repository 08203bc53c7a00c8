/**
 * The audit trail's writer (docs/architecture.md "Audit trail"; issue 14): records AuditEvents with
 * group commit. A record is durable (appended to the log) when its promise resolves; requests wait
 * for it before answering. While batches are being appended (at most {@link MAX_IN_FLIGHT} at
 * once), new records gather for the next, so concurrent requests share one append and the cost per
 * record stays small; an idle trail appends on the next turn of the event loop, adding no wait.
 */

import { auditDecider, auditStream } from '../domain/audit/audit.js';
import { newId } from '../domain/ids.js';
import type { AuditRecord } from '../fhir/audit-event.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';

/** Most records per append. */
const MAX_BATCH = 500;
/**
 * Appends running at once. One: records gather while a batch is appended, so batches grow with
 * the load and an append's fixed cost is shared by more reads (with one event per batch, measured
 * on 2 cores: ~8 records a batch and +30–40 % audited GETs over two in flight; docs/performance.md "Audit trail: one batch in flight").
 */
const MAX_IN_FLIGHT = 1;

interface Waiting {
  readonly record: AuditRecord;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export class AuditTrail {
  private waiting: Waiting[] = [];
  private inFlight = 0;
  private scheduled = false;
  private idle: (() => void)[] = [];

  /**
   * @param context a command context for each batch (actor: casebook's audit).
   * @param maxInFlight appends running at once (several let PostgreSQL share WAL flushes).
   */
  constructor(
    private readonly context: () => CommandContext,
    private readonly maxInFlight = MAX_IN_FLIGHT,
  ) {}

  /**
   * Records one AuditEvent.
   * @returns once it is in the log (the batch it joined was appended).
   * @throws what the append threw (the store is unreachable…): the caller must not answer as if audited.
   */
  record(record: AuditRecord): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ record, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves when every record given so far is appended (or failed). */
  drain(): Promise<void> {
    if (this.waiting.length === 0 && this.inFlight === 0 && !this.scheduled) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  /** Starts an append on the next turn of the event loop (records of this turn join it). */
  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.maxInFlight || this.waiting.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.inFlight >= this.maxInFlight || this.waiting.length === 0) return this.settle();
    const batch = this.waiting.splice(0, MAX_BATCH);
    this.inFlight++;
    try {
      await this.append(batch.map((w) => w.record));
      for (const w of batch) w.resolve();
    } catch (error) {
      for (const w of batch) w.reject(error);
    } finally {
      this.inFlight--;
    }
    this.schedule();
    this.settle();
  }

  private settle(): void {
    if (this.waiting.length > 0 || this.inFlight > 0 || this.scheduled) return;
    for (const resolve of this.idle.splice(0)) resolve();
  }

  /** One append: a stream per tenant in the batch, its events carrying that tenant. */
  private async append(records: readonly AuditRecord[]): Promise<void> {
    const byTenant = new Map<number | null, AuditRecord[]>();
    for (const record of records)
      byTenant.set(record.tenantId, [...(byTenant.get(record.tenantId) ?? []), record]);
    // Nobody in another process waits for an AuditEvent: their subscriptions see it at their poll.
    await execute(
      this.context(),
      async (uow) => {
        for (const [tenantId, group] of byTenant)
          await uow.decide(
            auditStream(newId()),
            auditDecider,
            { type: 'RecordAuditEvents', records: group },
            { fresh: true, cause: { tenantId } },
          );
      },
      { append: { wakeOthers: false } },
    );
  }
}
