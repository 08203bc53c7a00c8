/**
 * The subscription notifier (issue 37; docs/architecture.md "Subscriptions"; FHIR R5
 * subscriptions.html). Two duties, one elected process per database (a Postgres advisory lock):
 *
 * 1. **Decide** notifications from the log: it reads `$all` from its checkpoint, in log order, and
 *    for every stored version that triggers a topic records, on each matching subscription's
 *    stream, a notification with the next `eventsSinceSubscriptionStart` number
 *    (SubscriptionNotificationsDecided). The checkpoint is written after the decisions, and the
 *    decider skips events at or before the last position it numbered: a crash reads the log again
 *    and numbers nothing twice, and loses nothing (the report is in the log before any of this).
 * 2. **Deliver** them: the handshake of a `requested` subscription, then its notifications in
 *    event-number order, one request in flight per subscription and up to `concurrency`
 *    subscriptions at once (the export's machinery: jittered backoff, bounded requests, no
 *    redirects, the tenant's allow-list checked before each request). A failing endpoint makes
 *    the status `error` after `errorAfterMs`; attempts go on at the capped backoff, and the first
 *    success makes it `active` again. Delivery is at least once: a crash after the receiver
 *    answered and before SubscriptionNotificationsDelivered is stored sends the same event numbers
 *    again.
 */
import type { Logger } from 'pino';
import type { CommandContext } from '../../commands/context.js';
import { endpointAllowed, recordNotifications, recordOutcome } from '../../commands/subscriptions.js';
import { migrate, migrationsIn } from '../../db/migrations.js';
import type { Sql } from '../../db/sql.js';
import { fold } from '../../domain/decider.js';
import { type Content, resourceEventKind } from '../../domain/fhir/resource.js';
import {
  comparePositionText,
  type DecidedNotification,
  subscriptionSecretStream,
} from '../../domain/subscription/subscription.js';
import {
  passesFilters,
  type SubscriptionFilter,
  topicByUrl,
  triggeredTopics,
  triggerFacts,
} from '../../domain/subscription/topics.js';
import { tenantDecider, tenantStream } from '../../domain/tenant/tenant.js';
import {
  type Actor,
  type EventStore,
  parsePosition,
  positionToString,
  type RecordedEvent,
} from '../../eventstore/port.js';
import type { Metrics } from '../../metrics.js';
import type { ReadModelNotices } from '../../queries/read-models.js';
import {
  readNotifications,
  readSubscriptions,
  type SubscriptionRow,
  subscriptionBacklog,
} from '../../queries/subscriptions.js';
import { postBounded } from '../delivery/http-post.js';
import { jitteredBackoff, sleep } from '../delivery/schedule.js';
import { failureReason } from '../export/outside-text.js';
import { notificationBundle, SIGNATURE_HEADER, signatureHeader } from './notification.js';

const NOTIFIER_LOCK_KEY = `hashtext('casebook-subscriptions:' || current_schema())`;
const ACTOR: Actor = { type: 'system', id: 'subscriptions' };
/** Events read from the log per pass. */
const LOG_PAGE = 500;
/** The subscriptions read model's name, as the runner's `applied$` reports it. */
const SUBSCRIPTIONS_READ_MODEL = 'subscriptions';
/** Notifications per request when the Subscription gives no maxCount. */
const DEFAULT_MAX_COUNT = 10;

/** What the notifier needs of a Casebook. */
export interface NotifierDeps {
  readonly sql: Sql;
  readonly store: EventStore;
  readonly runner: ReadModelNotices;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** API clients by client_id: the owner's scopes decide what a full-resource payload may carry. */
  readonly clients: {
    find(clientId: string): Promise<{ scopes: readonly string[]; projects: readonly string[] } | undefined>;
  };
  context(cause: { tenantId: number | null; actor: Actor }): CommandContext;
}

export interface NotifierOptions {
  /** {fhir_base_url}: references in notifications. */
  readonly base: string;
  /** SUBSCRIPTION_ALLOWED_ORIGINS. */
  readonly allowedOrigins: readonly string[];
  readonly concurrency?: number;
  /** Bound of one request, ms (a Subscription's `timeout`, seconds, may shorten it). */
  readonly timeoutMs?: number;
  readonly retryBaseMs?: number;
  readonly retryMaxMs?: number;
  /** Failing this long (ms) makes the status `error`. */
  readonly errorAfterMs?: number;
  readonly pollMs?: number;
  readonly now?: () => Date;
  readonly random?: () => number;
}

/** A subscription as the decision pass matches it. */
interface Matcher {
  readonly row: SubscriptionRow;
  readonly topic: string;
  readonly filters: readonly SubscriptionFilter[];
}

const matcherOf = (row: SubscriptionRow): Matcher | undefined => {
  const topic = topicByUrl(String(row.resource.topic ?? ''));
  if (!topic) return undefined;
  const filters = ((row.resource.filterBy ?? []) as { filterParameter: string; value: string }[]).map(
    (f) => ({ filterParameter: f.filterParameter, value: f.value }) as SubscriptionFilter,
  );
  return { row, topic: topic.url, filters };
};

export class SubscriptionNotifier {
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly wakers = new Set<() => void>();
  private woken = false;
  private readonly secrets = new Map<string, string>();
  /** Last request to each subscription's endpoint (epoch ms): heartbeats count from it. */
  private readonly lastContact = new Map<string, number>();
  /** Deliveries finished in this process, and the count at which each subscription's last one did. */
  private finished = 0;
  private readonly finishedAt = new Map<string, number>();
  private readonly concurrency: number;
  private readonly timeoutMs: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly errorAfterMs: number;
  private readonly pollMs: number;
  private readonly now: () => Date;
  private readonly random: () => number;
  private migrated = false;
  /** Whether the last pass saw a live subscription. */
  private hasLive = true;

  constructor(
    private readonly deps: NotifierDeps,
    private readonly options: NotifierOptions,
  ) {
    this.concurrency = Math.max(1, options.concurrency ?? 4);
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retryBaseMs = options.retryBaseMs ?? 1000;
    this.retryMaxMs = options.retryMaxMs ?? 60_000;
    this.errorAfterMs = options.errorAfterMs ?? 10 * 60_000;
    this.pollMs = options.pollMs ?? 1000;
    this.now = options.now ?? (() => new Date());
    this.random = options.random ?? Math.random;
  }

  /** Creates the checkpoint table (once). */
  async migrate(): Promise<void> {
    if (this.migrated) return;
    await migrate(
      this.deps.sql,
      'subscription-notifier',
      migrationsIn(new URL('./sql/notifier/', import.meta.url)),
    );
    this.migrated = true;
  }

  /** Starts the notifier in the background: election, then following the log and the due deliveries. */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    const { sql, logger } = this.deps;
    this.loop = sql
      .withConnection(async (conn) => {
        while (!abort.signal.aborted) {
          const [lock] = await conn.query<{ ok: boolean }>(
            `SELECT pg_try_advisory_lock(${NOTIFIER_LOCK_KEY}) AS ok`,
          );
          if (lock?.ok) break;
          await sleep(2000, abort.signal);
        }
        if (abort.signal.aborted) return;
        try {
          await this.follow(abort.signal);
        } finally {
          await Promise.allSettled(this.inFlight.values());
          await conn.query(`SELECT pg_advisory_unlock(${NOTIFIER_LOCK_KEY})`).catch(() => undefined);
        }
      })
      .catch((error: unknown) => logger.error({ err: error }, 'subscription notifier stopped'));
  }

  /**
   * Delivery lag and failures for /metrics (and sets its gauges): notifications decided and not
   * delivered, the age of the oldest (seconds), subscriptions in `error`.
   */
  async health(): Promise<{ pending: number; oldestSeconds: number; erroring: number }> {
    const backlog = await subscriptionBacklog(this.deps.sql, this.now());
    this.deps.metrics?.subscriptionPending.set(backlog.pending);
    this.deps.metrics?.subscriptionOldestPendingSeconds.set(backlog.oldestSeconds);
    this.deps.metrics?.subscriptionsInError.set(backlog.erroring);
    return backlog;
  }

  /** Stops the notifier and waits for the requests in flight. */
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
    await this.migrate();
    // An append in this process wakes the loop at once (a report, a new subscription, a recorded
    // outcome); other processes' appends are seen at the next poll.
    // Without a live subscription only a change of the subscriptions read model wakes it: a
    // pass per append of a busy server would do nothing but cost queries.
    const applied = this.deps.runner.applied$.subscribe({
      next: (names) => {
        if (this.hasLive || !names || names.has(SUBSCRIPTIONS_READ_MODEL)) this.wake();
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
          await this.pass(signal);
        } catch (error) {
          if (signal.aborted) return;
          this.deps.logger.error({ err: error }, 'subscription notifier pass failed; retrying');
        }
        if (!this.woken) await sleep(this.pollMs, signal, wake);
      }
    } finally {
      applied.unsubscribe();
    }
  }

  /** One pass: decide from the log, then start the due deliveries. @returns deliveries started. */
  async pass(signal?: AbortSignal): Promise<number> {
    await this.migrate();
    if ((await this.decideFromLog()) >= LOG_PAGE) this.woken = true;
    if (!this.hasLive && this.inFlight.size === 0) return 0;
    return this.startDue(signal);
  }

  /**
   * Decides and delivers until nothing is left to do now (tests, `casebook` tooling).
   * @returns the number of deliveries made.
   */
  async drain(signal?: AbortSignal): Promise<number> {
    let started = 0;
    for (;;) {
      const now = await this.pass(signal);
      started += now;
      if (now === 0 && this.inFlight.size === 0) return started;
      if (this.inFlight.size > 0) await Promise.race(this.inFlight.values());
    }
  }

  private async checkpoint(): Promise<string | undefined> {
    const [row] = await this.deps.sql.query<{ position: string }>(
      `SELECT position FROM subscription_notifier_checkpoint WHERE id = 1`,
    );
    return row?.position;
  }

  private async saveCheckpoint(position: string): Promise<void> {
    await this.deps.sql.query(
      `INSERT INTO subscription_notifier_checkpoint (id, position) VALUES (1, $1)
       ON CONFLICT (id) DO UPDATE SET position = EXCLUDED.position`,
      [position],
    );
  }

  /**
   * Reads the next page of the log after the checkpoint and records the notifications it
   * triggers. With no live subscription the checkpoint jumps to the head (nothing to read).
   * @returns the number of events read.
   */
  async decideFromLog(): Promise<number> {
    const { store, sql } = this.deps;
    const from = await this.checkpoint();
    // Nothing to match: skip to the head (read before the subscriptions, so that a subscription
    // created meanwhile lies after the new checkpoint).
    const head = await store.headPosition();
    this.hasLive = (await readSubscriptions(sql, { live: true, limit: 1 })).length > 0;
    if (!this.hasLive) {
      if (head && positionToString(head) !== from) await this.saveCheckpoint(positionToString(head));
      return 0;
    }
    const events = await store.readAll({
      ...(from ? { from: parsePosition(from) } : {}),
      maxCount: LOG_PAGE,
    });
    if (events.length === 0) return 0;
    // Read after the page: every subscription created at or before its last event is here (the
    // read model commits with the append), and a later one is filtered by its created position.
    const matchers = (await readSubscriptions(sql, { live: true }))
      .map(matcherOf)
      .filter((m): m is Matcher => m !== undefined);
    const decided = new Map<string, { tenantId: number; list: Omit<DecidedNotification, 'eventNumber'>[] }>();
    if (matchers.length > 0) for (const event of events) this.match(event, matchers, decided);
    for (const [subscriptionId, { tenantId, list }] of decided)
      await recordNotifications(this.deps.context({ tenantId, actor: ACTOR }), subscriptionId, list);
    await this.saveCheckpoint(positionToString(events.at(-1)!.position));
    return events.length;
  }

  private match(
    event: RecordedEvent,
    matchers: readonly Matcher[],
    decided: Map<string, { tenantId: number; list: Omit<DecidedNotification, 'eventNumber'>[] }>,
  ): void {
    const kind = resourceEventKind(event.type);
    if (!kind || (kind.resourceType !== 'QuestionnaireResponse' && kind.resourceType !== 'Task')) return;
    // An erased patient's event tells nobody anything (docs/architecture.md "Erasure").
    if (event.erased) return;
    const data = event.data as { id?: number; resource?: Content; at?: string };
    const topics = triggeredTopics(kind.resourceType, kind.kind, data.resource);
    if (topics.length === 0 || typeof data.id !== 'number' || !data.resource) return;
    const tenantId = event.metadata.tenantId;
    const position = positionToString(event.position);
    const facts = triggerFacts(kind.resourceType, data.id, Number(event.revision) + 1, data.resource);
    for (const m of matchers) {
      if (m.row.tenantId !== tenantId) continue;
      if (!topics.some((t) => t.url === m.topic)) continue;
      if (comparePositionText(position, m.row.createdPosition) <= 0) continue;
      if (!passesFilters(facts, m.filters)) continue;
      const entry = decided.get(m.row.id) ?? { tenantId, list: [] };
      entry.list.push({
        topic: m.topic,
        focus: { resourceType: facts.resourceType, id: facts.id, version: facts.version },
        sourceEventId: event.id,
        sourcePosition: position,
        timestamp: data.at ?? event.metadata.recordedAt,
      });
      decided.set(m.row.id, entry);
    }
  }

  private async startDue(signal?: AbortSignal): Promise<number> {
    const free = this.concurrency - this.inFlight.size;
    if (free <= 0) return 0;
    const now = this.now();
    // A delivery that finishes while the rows are read leaves its row stale: not started again
    // on this pass (it would send the same notifications twice).
    const startedAt = this.finished;
    const due = await readSubscriptions(this.deps.sql, {
      live: true,
      due: now,
      limit: free + this.inFlight.size,
    });
    const heartbeats = (await readSubscriptions(this.deps.sql, { live: true })).filter((row) => {
      const period = Number(row.resource.heartbeatPeriod ?? 0);
      if (row.status !== 'active' || !period) return false;
      const last =
        this.lastContact.get(row.id) ?? row.lastDeliveredAt?.getTime() ?? row.lastUpdated.getTime();
      return now.getTime() - last >= period * 1000;
    });
    let started = 0;
    for (const [row, heartbeat] of [
      ...due.map((r) => [r, false] as const),
      ...heartbeats.map((r) => [r, true] as const),
    ]) {
      if (signal?.aborted || this.inFlight.size >= this.concurrency) break;
      if (this.inFlight.has(row.id)) continue;
      if ((this.finishedAt.get(row.id) ?? -1) >= startedAt) {
        this.woken = true;
        continue;
      }
      const delivery = this.deliverOne(row, heartbeat)
        .catch((error: unknown) =>
          this.deps.logger.error(
            { err: error, subscription: row.id },
            'recording a subscription delivery failed; retried on the next pass',
          ),
        )
        .finally(() => {
          this.finishedAt.set(row.id, this.finished++);
          this.inFlight.delete(row.id);
          this.wake();
        });
      this.inFlight.set(row.id, delivery);
      started++;
    }
    return started;
  }

  /** The subscription's signing secret (from its own stream, never a read model). */
  private async secretOf(id: string): Promise<string> {
    const cached = this.secrets.get(id);
    if (cached) return cached;
    const [event] = await this.deps.store.readStream(subscriptionSecretStream(id), { maxCount: 1 });
    const secret = (event?.data as { secret?: string } | undefined)?.secret;
    if (!secret) throw new Error(`Subscription/${id} has no secret`);
    this.secrets.set(id, secret);
    return secret;
  }

  private async tenantOrigins(tenantId: number): Promise<readonly string[]> {
    const events = await this.deps.store.readStream(tenantStream(tenantId));
    const tenant = fold(tenantDecider, events as never);
    return tenant.status === 'active' ? (tenant.subscriptionOrigins ?? []) : [];
  }

  private async deliverOne(row: SubscriptionRow, heartbeat: boolean): Promise<void> {
    const { logger, metrics } = this.deps;
    const now = this.now();
    const attempt = row.failedAttempts + 1;
    const ctx = this.deps.context({ tenantId: row.tenantId, actor: ACTOR });
    const content = (row.resource.content as 'empty' | 'id-only' | 'full-resource' | undefined) ?? 'id-only';
    // Without a maxCount the server chooses (FHIR R5 Subscription.maxCount): up to 10 per request.
    const maxCount = Number(row.resource.maxCount ?? DEFAULT_MAX_COUNT);
    const handshake = row.status === 'requested';
    const events =
      handshake || heartbeat
        ? []
        : await readNotifications(this.deps, row, row.deliveredThrough + 1, row.deliveredThrough + maxCount);
    if (!handshake && !heartbeat && events.length === 0) return;
    const type = handshake ? 'handshake' : heartbeat ? 'heartbeat' : 'event-notification';
    const body = JSON.stringify(
      notificationBundle({
        base: this.options.base,
        subscriptionId: row.id,
        topic: String(row.resource.topic),
        status: handshake ? 'requested' : row.status,
        type,
        eventsSinceSubscriptionStart: handshake || heartbeat ? row.eventsSince : events.at(-1)!.eventNumber,
        content,
        events,
        now: now.toISOString(),
      }),
    );
    const endpoint = String(row.resource.endpoint);
    const timeoutMs = Math.min(
      this.timeoutMs,
      row.resource.timeout ? Number(row.resource.timeout) * 1000 : this.timeoutMs,
    );
    this.lastContact.set(row.id, now.getTime());
    let failure: unknown;
    try {
      if (!endpointAllowed(endpoint, await this.tenantOrigins(row.tenantId), this.options.allowedOrigins))
        throw new Error("the endpoint's origin is no longer among the tenant's subscription origins");
      const secret = await this.secretOf(row.id);
      const t = Math.floor(now.getTime() / 1000);
      const status = await postBounded(new URL(endpoint), {
        headers: {
          'Content-Type': `${String(row.resource.contentType ?? 'application/fhir+json')}; charset=utf-8`,
          [SIGNATURE_HEADER]: signatureHeader(secret, t, body),
        },
        body,
        timeoutMs,
        signal: this.abort?.signal,
      });
      if (status < 200 || status > 299) throw new Error(`HTTP ${status} from the subscription endpoint`);
    } catch (error) {
      failure = error;
    }
    if (this.abort?.signal.aborted) return;
    if (heartbeat) {
      if (failure) logger.warn({ subscription: row.id, err: failure }, 'subscription heartbeat failed');
      return;
    }
    if (failure === undefined) {
      metrics?.subscriptionDeliveries.inc({ outcome: handshake ? 'handshake' : 'delivered' });
      await recordOutcome(
        ctx,
        row.id,
        handshake
          ? { type: 'activated' }
          : { type: 'delivered', through: events.at(-1)!.eventNumber, attempt },
      );
      if (!handshake && events.length > 0)
        metrics?.subscriptionDeliveryLagSeconds.observe(
          Math.max(0, (this.now().getTime() - new Date(events[0]!.timestamp).getTime()) / 1000),
        );
      return;
    }
    const reason = failureReason(failure, 'subscription endpoint');
    const since = row.failingSince ?? now;
    const errorAfter = now.getTime() - since.getTime() >= this.errorAfterMs;
    const nextAttemptAt = new Date(
      now.getTime() + jitteredBackoff(attempt, this.retryBaseMs, this.retryMaxMs, this.random),
    ).toISOString();
    metrics?.subscriptionDeliveries.inc({ outcome: 'failed' });
    logger.warn(
      { subscription: row.id, attempt, reason, nextAttemptAt, handshake },
      'subscription delivery failed',
    );
    await recordOutcome(ctx, row.id, { type: 'failed', attempt, error: reason, nextAttemptAt, errorAfter });
  }
}
