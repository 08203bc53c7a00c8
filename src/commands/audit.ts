/**
 * The audit trail's writer (docs/architecture.md "Audit trail"; issue 14): records AuditEvents with
 * group commit. A record is durable (appended to the log) when its promise resolves; requests wait
 * for it before answering. While one batch is being appended, new records gather for the next, so
 * concurrent requests share one append and the cost per record stays small; an idle trail appends
 * at once, adding no latency.
 */
import { v4 as uuidv4 } from 'uuid';
import { auditDecider, auditStream } from '../domain/audit/audit.js';
import { type AuditRecord, toAuditEvent } from '../fhir/audit-event.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';

/** Most records per append. */
const MAX_BATCH = 500;

interface Waiting {
  readonly record: AuditRecord;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export class AuditTrail {
  private waiting: Waiting[] = [];
  private flushing: Promise<void> | undefined;

  /** @param context a command context for each batch (actor: casebook's audit). */
  constructor(private readonly context: () => CommandContext) {}

  /**
   * Records one AuditEvent.
   * @returns once it is in the log (the batch it joined was appended).
   * @throws what the append threw (the store is unreachable…): the caller must not answer as if audited.
   */
  record(record: AuditRecord): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ record, resolve, reject });
      this.flushing ??= this.flush();
    });
  }

  /** Resolves when every record given so far is appended (or failed). */
  async drain(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  private async flush(): Promise<void> {
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0, MAX_BATCH);
      try {
        await this.append(batch.map((w) => w.record));
        for (const w of batch) w.resolve();
      } catch (error) {
        for (const w of batch) w.reject(error);
      }
    }
    this.flushing = undefined;
  }

  /** One append: a stream per tenant in the batch, its events carrying that tenant. */
  private async append(records: readonly AuditRecord[]): Promise<void> {
    const byTenant = new Map<number | null, AuditRecord[]>();
    for (const record of records)
      byTenant.set(record.tenantId, [...(byTenant.get(record.tenantId) ?? []), record]);
    await execute(this.context(), async (uow) => {
      for (const [tenantId, group] of byTenant)
        await uow.decide(
          auditStream(uuidv4()),
          auditDecider,
          { type: 'RecordAuditEvents', auditEvents: group.map(toAuditEvent) },
          { fresh: true, cause: { tenantId } },
        );
    });
  }
}
