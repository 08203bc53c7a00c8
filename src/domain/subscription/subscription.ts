/**
 * Subscription aggregate (issue 37; FHIR R5 subscriptions.html; docs/interface.md "Subscriptions",
 * docs/architecture.md "Subscriptions"): a tenant's topic-based Subscription, the notifications
 * decided for it from the log (each with its `eventsSinceSubscriptionStart` number) and what
 * became of their delivery. Stream `subscription-<id>`; the signing secret lives on its own stream
 * `subscription-secret-<id>`, which no read model projects.
 */
import { type Decider, DomainError, type Event } from '../decider.js';
import type { Content } from '../fhir/resource.js';

/** R5 Subscription.status values casebook uses. */
export type SubscriptionStatusCode = 'requested' | 'active' | 'error' | 'off';

/** The focus of one notification: a resource version. */
export interface NotificationFocus {
  readonly resourceType: 'QuestionnaireResponse' | 'Task';
  readonly id: number;
  readonly version: number;
}

/** One notification as decided (R5 SubscriptionStatus.notificationEvent). */
export interface DecidedNotification {
  /** `eventsSinceSubscriptionStart` of this notification: 1, 2, 3… per subscription. */
  readonly eventNumber: number;
  /** Canonical URL of the topic it belongs to. */
  readonly topic: string;
  readonly focus: NotificationFocus;
  /** The id of the event in the log that triggered it, and its `$all` position (`commit/prepare`). */
  readonly sourceEventId: string;
  readonly sourcePosition: string;
  /** When the triggering change was recorded (ISO 8601): notificationEvent.timestamp. */
  readonly timestamp: string;
}

export type SubscriptionEvent =
  | Event<
      'SubscriptionCreated',
      { subscriptionId: string; tenantId: number; owner: string; resource: Content; at: string }
    >
  | Event<
      'SubscriptionUpdated',
      { subscriptionId: string; resource: Content; status: SubscriptionStatusCode; at: string }
    >
  | Event<'SubscriptionDeleted', { subscriptionId: string; at: string }>
  | Event<
      'SubscriptionNotificationsDecided',
      { subscriptionId: string; notifications: DecidedNotification[]; at: string }
    >
  | Event<'SubscriptionActivated', { subscriptionId: string; at: string; resumed: boolean }>
  | Event<
      'SubscriptionNotificationsDelivered',
      { subscriptionId: string; through: number; attempt: number; at: string }
    >
  | Event<
      'SubscriptionDeliveryFailed',
      { subscriptionId: string; attempt: number; error: string; nextAttemptAt: string; at: string }
    >
  | Event<'SubscriptionErrored', { subscriptionId: string; error: string; at: string }>;

export type SubscriptionSecretEvent = Event<
  'SubscriptionSecretIssued',
  { subscriptionId: string; secret: string; at: string }
>;

export type Subscription =
  | { readonly status: 'none' }
  | {
      readonly status: SubscriptionStatusCode | 'deleted';
      readonly subscriptionId: string;
      readonly tenantId: number;
      /** client_id of the API client that created it: full resources only where it may read them. */
      readonly owner: string;
      /** The Subscription as given, without resourceType, id, meta and status. */
      readonly resource: Content;
      /** meta.versionId: bumped by the client's changes only, not by deliveries. */
      readonly version: number;
      readonly lastUpdated: string;
      readonly eventsSinceSubscriptionStart: number;
      readonly deliveredThrough: number;
      /** `$all` position of the last event a notification was decided on. */
      readonly lastSourcePosition: string | undefined;
      /** Consecutive failed attempts since the last success. */
      readonly failedAttempts: number;
      /** When the current run of failures began (ISO 8601). */
      readonly failingSince: string | undefined;
    };

export type SubscriptionCommand =
  | {
      readonly type: 'CreateSubscription';
      readonly subscriptionId: string;
      readonly tenantId: number;
      readonly owner: string;
      readonly resource: Content;
      readonly now: string;
    }
  | {
      readonly type: 'UpdateSubscription';
      readonly resource: Content;
      /** `off` stops delivery; `requested` (from off or error) asks for a new handshake; undefined keeps it. */
      readonly status: 'off' | 'requested' | undefined;
      readonly ifMatch: number | undefined;
      readonly now: string;
    }
  | { readonly type: 'DeleteSubscription'; readonly ifMatch: number | undefined; readonly now: string }
  | {
      readonly type: 'RecordNotifications';
      /** In log order; numbered here. */
      readonly notifications: readonly Omit<DecidedNotification, 'eventNumber'>[];
      readonly now: string;
    }
  | { readonly type: 'RecordActivation'; readonly now: string }
  | {
      readonly type: 'RecordDelivery';
      readonly through: number;
      readonly attempt: number;
      readonly now: string;
    }
  | {
      readonly type: 'RecordFailure';
      readonly attempt: number;
      readonly error: string;
      readonly nextAttemptAt: string;
      /** Set when the failures lasted longer than the configured time: the status becomes `error`. */
      readonly errorAfter: boolean;
      readonly now: string;
    };

/** Orders two `$all` positions written as `commit/prepare` (decimal). */
export const comparePositionText = (a: string, b: string): number => {
  const [ac, ap] = a.split('/').map(BigInt) as [bigint, bigint];
  const [bc, bp] = b.split('/').map(BigInt) as [bigint, bigint];
  if (ac !== bc) return ac < bc ? -1 : 1;
  if (ap !== bp) return ap < bp ? -1 : 1;
  return 0;
};

const notFound = () => new DomainError('not_found', 'ResourceNotFound', 'no Subscription with this id');

const live = (state: Subscription) => {
  if (state.status === 'none') throw notFound();
  if (state.status === 'deleted')
    throw new DomainError('gone', 'ResourceDeleted', `Subscription/${state.subscriptionId} was deleted`);
  return state;
};

const checkVersion = (state: { version: number; subscriptionId: string }, ifMatch: number | undefined) => {
  if (ifMatch !== undefined && ifMatch !== state.version)
    throw new DomainError(
      'precondition_failed',
      'VersionConflict',
      `Subscription/${state.subscriptionId} is at version ${state.version}, not ${ifMatch}`,
    );
};

export const subscriptionDecider: Decider<SubscriptionCommand, Subscription, SubscriptionEvent> = {
  initialState: { status: 'none' },
  evolve: (state, event) => {
    if (event.type === 'SubscriptionCreated')
      return {
        status: 'requested',
        subscriptionId: event.data.subscriptionId,
        tenantId: event.data.tenantId,
        owner: event.data.owner,
        resource: event.data.resource,
        version: 1,
        lastUpdated: event.data.at,
        eventsSinceSubscriptionStart: 0,
        deliveredThrough: 0,
        lastSourcePosition: undefined,
        failedAttempts: 0,
        failingSince: undefined,
      };
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'SubscriptionUpdated':
        return {
          ...state,
          resource: event.data.resource,
          status: event.data.status,
          version: state.version + 1,
          lastUpdated: event.data.at,
          ...(event.data.status === 'requested' ? { failedAttempts: 0, failingSince: undefined } : {}),
        };
      case 'SubscriptionDeleted':
        return { ...state, status: 'deleted', version: state.version + 1, lastUpdated: event.data.at };
      case 'SubscriptionNotificationsDecided': {
        const last = event.data.notifications.at(-1);
        return last
          ? {
              ...state,
              eventsSinceSubscriptionStart: last.eventNumber,
              lastSourcePosition: last.sourcePosition,
            }
          : state;
      }
      case 'SubscriptionActivated':
        return { ...state, status: 'active', failedAttempts: 0, failingSince: undefined };
      case 'SubscriptionNotificationsDelivered':
        return {
          ...state,
          deliveredThrough: Math.max(state.deliveredThrough, event.data.through),
          failedAttempts: 0,
          failingSince: undefined,
        };
      case 'SubscriptionDeliveryFailed':
        return {
          ...state,
          failedAttempts: state.failedAttempts + 1,
          failingSince: state.failingSince ?? event.data.at,
        };
      case 'SubscriptionErrored':
        return { ...state, status: 'error' };
      default: {
        const _exhaustive: never = event;
        return state;
      }
    }
  },
  decide: (command, state) => {
    switch (command.type) {
      case 'CreateSubscription':
        if (state.status !== 'none')
          throw new DomainError('conflict', 'SubscriptionExists', 'the subscription already exists');
        return [
          {
            type: 'SubscriptionCreated',
            data: {
              subscriptionId: command.subscriptionId,
              tenantId: command.tenantId,
              owner: command.owner,
              resource: command.resource,
              at: command.now,
            },
          },
        ];
      case 'UpdateSubscription': {
        const s = live(state);
        checkVersion(s, command.ifMatch);
        const status: SubscriptionStatusCode =
          command.status === 'off'
            ? 'off'
            : command.status === 'requested' && (s.status === 'off' || s.status === 'error')
              ? 'requested'
              : (s.status as SubscriptionStatusCode);
        if (JSON.stringify(s.resource) === JSON.stringify(command.resource) && status === s.status) return [];
        return [
          {
            type: 'SubscriptionUpdated',
            data: { subscriptionId: s.subscriptionId, resource: command.resource, status, at: command.now },
          },
        ];
      }
      case 'DeleteSubscription': {
        if (state.status === 'deleted') return [];
        const s = live(state);
        checkVersion(s, command.ifMatch);
        return [{ type: 'SubscriptionDeleted', data: { subscriptionId: s.subscriptionId, at: command.now } }];
      }
      case 'RecordNotifications': {
        // Decided in log order: an event at or before the last one decided on was seen already
        // (the notifier read the log again after a crash), so it is not numbered twice.
        if (state.status === 'none' || state.status === 'deleted') return [];
        let number = state.eventsSinceSubscriptionStart;
        let last = state.lastSourcePosition;
        const notifications: DecidedNotification[] = [];
        for (const n of command.notifications) {
          if (last !== undefined && comparePositionText(n.sourcePosition, last) <= 0) continue;
          number += 1;
          last = n.sourcePosition;
          notifications.push({ ...n, eventNumber: number });
        }
        if (notifications.length === 0) return [];
        return [
          {
            type: 'SubscriptionNotificationsDecided',
            data: { subscriptionId: state.subscriptionId, notifications, at: command.now },
          },
        ];
      }
      case 'RecordActivation': {
        if (state.status === 'none' || state.status === 'deleted' || state.status === 'off') return [];
        if (state.status === 'active') return [];
        return [
          {
            type: 'SubscriptionActivated',
            data: {
              subscriptionId: state.subscriptionId,
              at: command.now,
              resumed: state.status === 'error',
            },
          },
        ];
      }
      case 'RecordDelivery': {
        if (state.status === 'none' || state.status === 'deleted') return [];
        if (command.through <= state.deliveredThrough) return [];
        return [
          ...(state.status === 'error'
            ? [
                {
                  type: 'SubscriptionActivated' as const,
                  data: { subscriptionId: state.subscriptionId, at: command.now, resumed: true },
                },
              ]
            : []),
          {
            type: 'SubscriptionNotificationsDelivered',
            data: {
              subscriptionId: state.subscriptionId,
              through: command.through,
              attempt: command.attempt,
              at: command.now,
            },
          },
        ];
      }
      case 'RecordFailure': {
        if (state.status === 'none' || state.status === 'deleted' || state.status === 'off') return [];
        const failed: SubscriptionEvent = {
          type: 'SubscriptionDeliveryFailed',
          data: {
            subscriptionId: state.subscriptionId,
            attempt: command.attempt,
            error: command.error,
            nextAttemptAt: command.nextAttemptAt,
            at: command.now,
          },
        };
        if (!command.errorAfter || state.status === 'error') return [failed];
        return [
          failed,
          {
            type: 'SubscriptionErrored',
            data: { subscriptionId: state.subscriptionId, error: command.error, at: command.now },
          },
        ];
      }
      default: {
        const _exhaustive: never = command;
        return [];
      }
    }
  },
};

/** The secret's stream holds one fact: the secret issued on create. */
export const subscriptionSecretDecider: Decider<
  {
    readonly type: 'IssueSecret';
    readonly subscriptionId: string;
    readonly secret: string;
    readonly now: string;
  },
  { readonly secret: string | undefined },
  SubscriptionSecretEvent
> = {
  initialState: { secret: undefined },
  evolve: (_state, event) => ({ secret: event.data.secret }),
  decide: (command, state) =>
    state.secret !== undefined
      ? []
      : [
          {
            type: 'SubscriptionSecretIssued',
            data: { subscriptionId: command.subscriptionId, secret: command.secret, at: command.now },
          },
        ],
};

export const subscriptionStream = (id: string): string => `subscription-${id}`;
export const subscriptionSecretStream = (id: string): string => `subscription-secret-${id}`;

/** Every event type of the aggregate (the read model handles these). */
export const SUBSCRIPTION_EVENT_TYPES: ReadonlySet<string> = new Set([
  'SubscriptionCreated',
  'SubscriptionUpdated',
  'SubscriptionDeleted',
  'SubscriptionNotificationsDecided',
  'SubscriptionActivated',
  'SubscriptionNotificationsDelivered',
  'SubscriptionDeliveryFailed',
  'SubscriptionErrored',
]);
