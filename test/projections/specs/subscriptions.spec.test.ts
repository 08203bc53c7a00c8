/**
 * Projection spec of `rm_subscriptions` and `rm_subscription_notifications`
 * (src/projections/subscriptions.ts; docs/architecture.md "Projections", "Subscriptions"): given
 * subscription events → then rows, inline, by catch-up and by rebuild, on PGlite and PostgreSQL.
 * `created_position` is the event's position in this database's log: only its presence is compared.
 */
import { subscriptionStream } from '../../../src/domain/subscription/subscription.js';
import { subscriptionsProjection } from '../../../src/projections/subscriptions.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const at = (minute: number) => `2026-03-01T10:${String(minute).padStart(2, '0')}:00.000Z`;
const RESOURCE = {
  resourceType: 'Subscription',
  status: 'requested',
  topic: 'urn:topic',
  channelType: { code: 'rest-hook' },
};

const event = (id: string, type: string, data: Record<string, unknown>) =>
  specEvent(subscriptionStream(id), type, { subscriptionId: id, ...data });
const created = (id: string) =>
  event(id, 'SubscriptionCreated', { tenantId: 1, owner: 'client:ehr', resource: RESOURCE, at: at(0) });
const notification = (eventNumber: number) => ({
  eventNumber,
  topic: 'urn:topic',
  focus: { reference: `Patient/${eventNumber}` },
  sourceEventId: `00000000-0000-4000-8000-00000000000${eventNumber}`,
  sourcePosition: `${eventNumber}/${eventNumber}`,
});

const subscription = (id: string) =>
  `SELECT id, tenant_id, owner, status, resource->>'status' AS resource_status, version, last_updated,
          created_position IS NOT NULL AS positioned, events_since, delivered_through, failed_attempts,
          next_attempt_at, failing_since, last_error, last_delivered_at, revision
     FROM rm_subscriptions WHERE id = '${id}'`;
const notifications = (id: string) =>
  `SELECT event_number, stream_revision, decided_at, delivered_at FROM rm_subscription_notifications
    WHERE subscription_id = '${id}' ORDER BY event_number`;

const base = {
  tenant_id: 1,
  owner: 'client:ehr',
  resource_status: 'requested',
  version: 1,
  last_updated: at(0),
  positioned: true,
  events_since: 0,
  delivered_through: 0,
  failed_attempts: 0,
  next_attempt_at: at(0),
  failing_since: null,
  last_error: null,
  last_delivered_at: null,
};

for (const db of testDatabases)
  describe(`projection spec: subscriptions on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [subscriptionsProjection]);

    it('SubscriptionCreated inserts a requested subscription', () =>
      spec
        .given(created('s-1'))
        .thenRows(subscription('s-1'), [{ id: 's-1', status: 'requested', revision: 0, ...base }]));

    it('activated, notified, failed, delivered: the counters and the notifications rows follow', async () => {
      const given = spec.given(created('s-2')).when(
        event('s-2', 'SubscriptionActivated', { at: at(1), resumed: false }),
        event('s-2', 'SubscriptionNotificationsDecided', {
          notifications: [notification(1), notification(2)],
          at: at(2),
        }),
        event('s-2', 'SubscriptionDeliveryFailed', {
          error: 'refused',
          attempt: 1,
          nextAttemptAt: at(9),
          at: at(3),
        }),
        event('s-2', 'SubscriptionNotificationsDelivered', { through: 1, attempt: 2, at: at(4) }),
      );
      await given.thenRows(subscription('s-2'), [
        {
          ...base,
          id: 's-2',
          status: 'active',
          events_since: 2,
          delivered_through: 1,
          next_attempt_at: at(4),
          last_delivered_at: at(4),
          revision: 4,
        },
      ]);
      await spec.given().thenRows(notifications('s-2'), [
        { event_number: 1, stream_revision: 2, decided_at: at(2), delivered_at: at(4) },
        { event_number: 2, stream_revision: 2, decided_at: at(2), delivered_at: null },
      ]);
    });

    it('a deletion marks it deleted and counts a version', () =>
      spec
        .given(created('s-3'))
        .when(event('s-3', 'SubscriptionDeleted', { at: at(5) }))
        .thenRows(subscription('s-3'), [
          { ...base, id: 's-3', status: 'deleted', version: 2, last_updated: at(5), revision: 1 },
        ]));
  });
