/**
 * The subscriptions read model (issue 37; docs/architecture.md "Subscriptions"): one row per
 * Subscription (`rm_subscriptions`: what reads and searches show, and what the notifier's delivery
 * worker schedules by) and one row per decided notification (`rm_subscription_notifications`:
 * its event number and the revision of the event on the subscription's stream that holds it, so a
 * delivery or a `$events` replay reads just those events). The signing secret is on a stream this
 * projection does not handle: it is in no read model. Built only from events: replaying gives the
 * same rows (every statement is guarded by the stream revision or keyed by event number).
 */
import type { Sql } from '../db/sql.js';
import { SUBSCRIPTION_EVENT_TYPES, type SubscriptionEvent } from '../domain/subscription/subscription.js';
import { positionToString, type RecordedEvent } from '../eventstore/port.js';
import { migrateReadModel, type Projection } from './projection.js';

export const subscriptionsProjection: Projection = {
  name: 'subscriptions',
  tables: ['rm_subscriptions', 'rm_subscription_notifications'],
  migrate: (sql) => migrateReadModel(sql, 'subscriptions'),
  handles: (type) => SUBSCRIPTION_EVENT_TYPES.has(type),
  // Subscriptions change at the pace of reports: one statement per event, guarded by the revision.
  apply: async (events, tx) => {
    for (const event of events) await applyOne(event, tx);
  },
};

const applyOne = async (event: RecordedEvent, tx: Sql): Promise<void> => {
  const e = { type: event.type, data: event.data } as SubscriptionEvent;
  const revision = Number(event.revision);
  const guard = `WHERE id = $1 AND revision < $2`;
  switch (e.type) {
    case 'SubscriptionCreated':
      await tx.query(
        `INSERT INTO rm_subscriptions (id, tenant_id, owner, status, resource, version, last_updated,
           created_position, next_attempt_at, revision)
         VALUES ($1, $2, $3, 'requested', $4::json, 1, $5, $6, $5, $7) ON CONFLICT (id) DO NOTHING`,
        [
          e.data.subscriptionId,
          e.data.tenantId,
          e.data.owner,
          JSON.stringify(e.data.resource),
          e.data.at,
          positionToString(event.position),
          revision,
        ],
      );
      return;
    case 'SubscriptionUpdated':
      await tx.query(
        `UPDATE rm_subscriptions SET resource = $3::json, status = $4, version = version + 1, last_updated = $5,
           next_attempt_at = CASE WHEN $4 = 'requested' THEN $5 ELSE next_attempt_at END,
           failed_attempts = CASE WHEN $4 = 'requested' THEN 0 ELSE failed_attempts END,
           failing_since = CASE WHEN $4 = 'requested' THEN NULL ELSE failing_since END,
           revision = $2 ${guard}`,
        [e.data.subscriptionId, revision, JSON.stringify(e.data.resource), e.data.status, e.data.at],
      );
      return;
    case 'SubscriptionDeleted':
      await tx.query(
        `UPDATE rm_subscriptions SET status = 'deleted', version = version + 1, last_updated = $3, revision = $2 ${guard}`,
        [e.data.subscriptionId, revision, e.data.at],
      );
      return;
    case 'SubscriptionNotificationsDecided': {
      const last = e.data.notifications.at(-1);
      if (!last) return;
      await tx.query(
        `UPDATE rm_subscriptions SET events_since = GREATEST(events_since, $3), revision = $2 ${guard}`,
        [e.data.subscriptionId, revision, last.eventNumber],
      );
      await tx.query(
        `INSERT INTO rm_subscription_notifications (subscription_id, event_number, stream_revision, decided_at)
         SELECT $1, n, $2, $3 FROM unnest($4::integer[]) AS n
         ON CONFLICT (subscription_id, event_number) DO NOTHING`,
        [e.data.subscriptionId, revision, e.data.at, e.data.notifications.map((n) => n.eventNumber)],
      );
      return;
    }
    case 'SubscriptionActivated':
      await tx.query(
        `UPDATE rm_subscriptions SET status = 'active', failed_attempts = 0, failing_since = NULL,
           last_error = NULL, next_attempt_at = $3, revision = $2 ${guard}`,
        [e.data.subscriptionId, revision, e.data.at],
      );
      return;
    case 'SubscriptionNotificationsDelivered':
      await tx.query(
        `UPDATE rm_subscriptions SET delivered_through = GREATEST(delivered_through, $3), failed_attempts = 0,
           failing_since = NULL, last_error = NULL, last_delivered_at = $4, next_attempt_at = $4, revision = $2 ${guard}`,
        [e.data.subscriptionId, revision, e.data.through, e.data.at],
      );
      await tx.query(
        `UPDATE rm_subscription_notifications SET delivered_at = $3
          WHERE subscription_id = $1 AND event_number <= $2 AND delivered_at IS NULL`,
        [e.data.subscriptionId, e.data.through, e.data.at],
      );
      return;
    case 'SubscriptionDeliveryFailed':
      await tx.query(
        `UPDATE rm_subscriptions SET failed_attempts = failed_attempts + 1, failing_since = COALESCE(failing_since, $3),
           last_error = $4, next_attempt_at = $5, revision = $2 ${guard}`,
        [e.data.subscriptionId, revision, e.data.at, e.data.error, e.data.nextAttemptAt],
      );
      return;
    case 'SubscriptionErrored':
      await tx.query(`UPDATE rm_subscriptions SET status = 'error', revision = $2 ${guard}`, [
        e.data.subscriptionId,
        revision,
      ]);
      return;
    default: {
      const _exhaustive: never = e;
      return;
    }
  }
};

/** A row of `rm_subscriptions` as the edge and the worker use it. */
export interface SubscriptionRow {
  readonly id: string;
  readonly tenantId: number;
  readonly owner: string;
  readonly status: string;
  readonly resource: Record<string, unknown>;
  readonly version: number;
  readonly lastUpdated: Date;
  readonly createdPosition: string;
  readonly eventsSince: number;
  readonly deliveredThrough: number;
  readonly failedAttempts: number;
  readonly nextAttemptAt: Date;
  readonly failingSince: Date | null;
  readonly lastError: string | null;
  readonly lastDeliveredAt: Date | null;
}

type RawRow = {
  id: string;
  tenant_id: number;
  owner: string;
  status: string;
  resource: Record<string, unknown> | string;
  version: number;
  last_updated: string | Date;
  created_position: string;
  events_since: number;
  delivered_through: number;
  failed_attempts: number;
  next_attempt_at: string | Date;
  failing_since: string | Date | null;
  last_error: string | null;
  last_delivered_at: string | Date | null;
};

const date = (v: string | Date | null): Date | null => (v === null ? null : new Date(v));

const toRow = (r: RawRow): SubscriptionRow => ({
  id: r.id,
  tenantId: Number(r.tenant_id),
  owner: r.owner,
  status: r.status,
  resource: typeof r.resource === 'string' ? JSON.parse(r.resource) : r.resource,
  version: Number(r.version),
  lastUpdated: new Date(r.last_updated),
  createdPosition: r.created_position,
  eventsSince: Number(r.events_since),
  deliveredThrough: Number(r.delivered_through),
  failedAttempts: Number(r.failed_attempts),
  nextAttemptAt: new Date(r.next_attempt_at),
  failingSince: date(r.failing_since),
  lastError: r.last_error,
  lastDeliveredAt: date(r.last_delivered_at),
});

/** Reads subscriptions: one by id in a tenant, the tenant's, or (no tenant) every live one. */
export const readSubscriptions = async (
  sql: Sql,
  filter: { tenantId?: number; id?: string; live?: boolean; due?: Date; limit?: number },
): Promise<SubscriptionRow[]> => {
  const where: string[] = [];
  const values: unknown[] = [];
  if (filter.tenantId !== undefined) {
    values.push(filter.tenantId);
    where.push(`tenant_id = $${values.length}`);
  }
  if (filter.id !== undefined) {
    values.push(filter.id);
    where.push(`id = $${values.length}`);
  }
  if (filter.live) where.push(`status IN ('requested', 'active', 'error')`);
  else where.push(`status <> 'deleted'`);
  if (filter.due) {
    values.push(filter.due.toISOString());
    where.push(
      `next_attempt_at <= $${values.length} AND (status = 'requested' OR delivered_through < events_since)`,
    );
  }
  const rows = await sql.query<RawRow>(
    `SELECT * FROM rm_subscriptions WHERE ${where.join(' AND ')}
      ORDER BY ${filter.due ? 'next_attempt_at, id' : 'last_updated, id'} LIMIT ${Math.max(1, filter.limit ?? 1000)}`,
    values,
  );
  return rows.map(toRow);
};

/** The stream revisions holding notifications `from`..`until` (inclusive) of a subscription, in order. */
export const notificationRevisions = async (
  sql: Sql,
  subscriptionId: string,
  from: number,
  until: number,
): Promise<{ eventNumber: number; revision: number }[]> => {
  const rows = await sql.query<{ event_number: number; stream_revision: string | number }>(
    `SELECT event_number, stream_revision FROM rm_subscription_notifications
      WHERE subscription_id = $1 AND event_number BETWEEN $2 AND $3 ORDER BY event_number`,
    [subscriptionId, from, until],
  );
  return rows.map((r) => ({ eventNumber: Number(r.event_number), revision: Number(r.stream_revision) }));
};

/** Delivery lag and failures for /metrics: undelivered notifications and the age of the oldest, seconds. */
export const subscriptionBacklog = async (
  sql: Sql,
  now: Date,
): Promise<{ pending: number; oldestSeconds: number; erroring: number }> => {
  const [row] = await sql.query<{ pending: string; oldest: string | Date | null }>(
    `SELECT count(*)::text AS pending, min(n.decided_at) AS oldest
       FROM rm_subscription_notifications n JOIN rm_subscriptions s ON s.id = n.subscription_id
      WHERE n.delivered_at IS NULL AND s.status IN ('requested', 'active', 'error')`,
  );
  const [err] = await sql.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM rm_subscriptions WHERE status = 'error'`,
  );
  return {
    pending: Number(row?.pending ?? 0),
    oldestSeconds: row?.oldest ? Math.max(0, (now.getTime() - new Date(row.oldest).getTime()) / 1000) : 0,
    erroring: Number(err?.n ?? 0),
  };
};
