/**
 * The Subscription decider (issue 37): notifications numbered per subscription in log order, an
 * event seen again (the notifier read the log again after a crash) numbered nothing twice,
 * deliveries only forward, the error status after the configured time and back on success.
 */
import { describe, it } from 'mocha';
import {
  type SubscriptionCommand,
  type SubscriptionEvent,
  subscriptionDecider,
} from '../../src/domain/subscription/subscription.js';
import { REPORT_TOPIC_URL } from '../../src/domain/subscription/topics.js';
import { given } from '../support/given.js';

const AT = '2026-03-01T10:00:00.000Z';
const ID = '0193a000-0000-7000-8000-000000000001';
const created: SubscriptionEvent = {
  type: 'SubscriptionCreated',
  data: { subscriptionId: ID, tenantId: 1, owner: 'ehr', resource: { topic: REPORT_TOPIC_URL }, at: AT },
};
const trigger = (position: string, id: number) => ({
  topic: REPORT_TOPIC_URL,
  focus: { resourceType: 'QuestionnaireResponse' as const, id, version: 2 },
  sourceEventId: `e-${position}`,
  sourcePosition: position,
  timestamp: AT,
});
const record = (...notifications: ReturnType<typeof trigger>[]): SubscriptionCommand => ({
  type: 'RecordNotifications',
  notifications,
  now: AT,
});
const decided = (...numbered: [number, ReturnType<typeof trigger>][]): SubscriptionEvent => ({
  type: 'SubscriptionNotificationsDecided',
  data: {
    subscriptionId: ID,
    notifications: numbered.map(([eventNumber, n]) => ({ ...n, eventNumber })),
    at: AT,
  },
});

describe('Subscription decider', () => {
  it('numbers notifications 1, 2, … in log order', () => {
    given(subscriptionDecider, [created])
      .when(record(trigger('10/1', 5), trigger('10/2', 6)))
      .then([decided([1, trigger('10/1', 5)], [2, trigger('10/2', 6)])]);
  });

  it('numbers nothing twice when the log is read again after a crash', () => {
    const history = [created, decided([1, trigger('10/1', 5)], [2, trigger('10/2', 6)])];
    given(subscriptionDecider, history)
      .when(record(trigger('10/1', 5), trigger('10/2', 6)))
      .then([]);
    given(subscriptionDecider, history)
      .when(record(trigger('10/2', 6), trigger('11/1', 7)))
      .then([decided([3, trigger('11/1', 7)])]);
  });

  it('compares positions as numbers, not text', () => {
    given(subscriptionDecider, [created, decided([1, trigger('9/5', 5)])])
      .when(record(trigger('10/1', 6)))
      .then([decided([2, trigger('10/1', 6)])]);
  });

  it('records a delivery only forward, and a handshake once', () => {
    const activated: SubscriptionEvent = {
      type: 'SubscriptionActivated',
      data: { subscriptionId: ID, at: AT, resumed: false },
    };
    given(subscriptionDecider, [created]).when({ type: 'RecordActivation', now: AT }).then([activated]);
    const delivered: SubscriptionEvent = {
      type: 'SubscriptionNotificationsDelivered',
      data: { subscriptionId: ID, through: 2, attempt: 1, at: AT },
    };
    given(subscriptionDecider, [created, activated, delivered])
      .when({ type: 'RecordDelivery', through: 2, attempt: 1, now: AT })
      .then([]);
    given(subscriptionDecider, [created, activated, delivered])
      .when({ type: 'RecordActivation', now: AT })
      .then([]);
  });

  it('turns error after the configured time of failures, and active again on the next delivery', () => {
    const activated: SubscriptionEvent = {
      type: 'SubscriptionActivated',
      data: { subscriptionId: ID, at: AT, resumed: false },
    };
    const failure = {
      type: 'RecordFailure' as const,
      attempt: 3,
      error: 'HTTP 503 from the subscription endpoint',
      nextAttemptAt: AT,
      errorAfter: true,
      now: AT,
    };
    const failed: SubscriptionEvent = {
      type: 'SubscriptionDeliveryFailed',
      data: { subscriptionId: ID, attempt: 3, error: failure.error, nextAttemptAt: AT, at: AT },
    };
    const errored: SubscriptionEvent = {
      type: 'SubscriptionErrored',
      data: { subscriptionId: ID, error: failure.error, at: AT },
    };
    given(subscriptionDecider, [created, activated]).when(failure).then([failed, errored]);
    given(subscriptionDecider, [created, activated, failed, errored])
      .when({ type: 'RecordDelivery', through: 1, attempt: 4, now: AT })
      .then([
        { type: 'SubscriptionActivated', data: { subscriptionId: ID, at: AT, resumed: true } },
        {
          type: 'SubscriptionNotificationsDelivered',
          data: { subscriptionId: ID, through: 1, attempt: 4, at: AT },
        },
      ]);
  });

  it('refuses a stale If-Match and changes nothing after a delete', () => {
    given(subscriptionDecider, [created])
      .when({
        type: 'UpdateSubscription',
        resource: { topic: REPORT_TOPIC_URL },
        status: 'off',
        ifMatch: 7,
        now: AT,
      })
      .thenThrows('VersionConflict', 'precondition_failed');
    const deleted: SubscriptionEvent = { type: 'SubscriptionDeleted', data: { subscriptionId: ID, at: AT } };
    given(subscriptionDecider, [created, deleted])
      .when(record(trigger('10/1', 5)))
      .then([]);
    given(subscriptionDecider, [created, deleted])
      .when({ type: 'UpdateSubscription', resource: {}, status: undefined, ifMatch: undefined, now: AT })
      .thenThrows('ResourceDeleted', 'gone');
  });
});
