/**
 * FHIR R5 Subscriptions, the write side (issue 37; docs/interface.md "Subscriptions",
 * docs/architecture.md "Subscriptions"): create, update and delete by an API client with
 * `system/Subscription.*` scopes, and what the notifier records — the notifications decided from
 * the log, the handshake, deliveries and failures. Every write goes through the command handler.
 */
import { ZodError } from 'zod';
import { DomainError } from '../domain/decider.js';
import type { Content } from '../domain/fhir/resource.js';
import { newId } from '../domain/ids.js';
import {
  type DecidedNotification,
  type Subscription,
  subscriptionDecider,
  subscriptionSecretDecider,
  subscriptionSecretStream,
  subscriptionStream,
} from '../domain/subscription/subscription.js';
import { tenantDecider, tenantStream } from '../domain/tenant/tenant.js';
import type { Principal } from '../fhir/access.js';
import { ResourceValidationError } from '../fhir/resources.js';
import { type Permission, scopesFor } from '../fhir/scopes.js';
import { SUBSCRIPTION_SECRET_EXTENSION, subscriptionSchema } from '../fhir/subscription.schema.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';
import { randomToken } from './secrets.js';

const PERMISSION_NAMES: Record<Permission, string> = {
  c: 'create',
  r: 'read',
  u: 'update',
  d: 'delete',
  s: 'search',
};

/**
 * Refuses a caller without a `system/Subscription.<permission>` scope (or `system/*`): only API
 * clients manage Subscriptions, tenant-wide (issue 37). Sessions never do.
 * @throws {DomainError} forbidden.
 */
export const authorizeSubscriptions = (principal: Principal, permission: Permission): void => {
  const granted =
    principal.kind === 'client' &&
    scopesFor([...principal.scopes], { resourceType: 'Subscription', permission }).some(
      (s) => s.context === 'system',
    );
  if (!granted)
    throw new DomainError(
      'forbidden',
      'ScopeNotGranted',
      `${PERMISSION_NAMES[permission]} on Subscription needs an API client with a system/Subscription.${permission} scope`,
      undefined,
      { issueCode: 'forbidden' },
    );
};

/**
 * Is `endpoint`'s origin one the tenant allows (issue 37: the tenant's `subscription_origins` and
 * SUBSCRIPTION_ALLOWED_ORIGINS; a loopback address only when listed like any other)?
 */
export const endpointAllowed = (
  endpoint: string,
  tenantOrigins: readonly string[],
  globalOrigins: readonly string[],
): boolean => {
  let origin: string;
  try {
    origin = new URL(endpoint).origin;
  } catch {
    return false;
  }
  return [...tenantOrigins, ...globalOrigins].includes(origin);
};

/**
 * A request body as stored Subscription content: validated, without what the server owns
 * (resourceType, id, meta, status) and without a secret extension.
 * @throws {ResourceValidationError} 422 with one issue per problem; {DomainError} 400 for a non-object.
 */
export const parseSubscription = (
  body: unknown,
): { content: Content; status: 'off' | 'requested' | undefined } => {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw new DomainError('invalid', 'InvalidBody', 'the body must be a Subscription resource (JSON object)');
  const parsed = subscriptionSchema.safeParse(body);
  if (!parsed.success)
    throw new ResourceValidationError('Subscription', new ZodError(parsed.error.issues), body);
  const { resourceType: _t, id: _i, meta: _m, status, extension, ...rest } = parsed.data;
  const kept = extension?.filter((e) => !e.url.endsWith('subscription-secret'));
  const content: Content = { ...rest, ...(kept && kept.length > 0 ? { extension: kept } : {}) };
  return {
    content,
    status:
      status === 'off' ? 'off' : status === 'requested' || status === 'active' ? 'requested' : undefined,
  };
};

const refuseEndpoint = (endpoint: string) =>
  new DomainError(
    'unprocessable',
    'EndpointNotAllowed',
    `the endpoint's origin ${(() => {
      try {
        return new URL(endpoint).origin;
      } catch {
        return endpoint;
      }
    })()} is not among the tenant's subscription origins (seed subscription_origins, SUBSCRIPTION_ALLOWED_ORIGINS)`,
    'Subscription.endpoint',
    { issueCode: 'business-rule' },
  );

/** What a write of a Subscription returns. */
export interface SubscriptionWrite {
  readonly state: Exclude<Subscription, { status: 'none' }>;
  /** Only on create: the signing secret, shown once. */
  readonly secret?: string;
}

const liveState = (state: Subscription) => {
  if (state.status === 'none') throw new Error('subscription state missing after a write');
  return state;
};

/**
 * Creates a Subscription (status `requested`; the notifier's handshake makes it `active`) and its
 * signing secret, in one append. The secret is returned here only.
 * @throws {DomainError} 403 without the scope, 422 for an endpoint the tenant does not allow;
 *   {ResourceValidationError} 422 for an invalid body.
 */
export const createSubscription = async (
  ctx: CommandContext,
  principal: Principal,
  body: unknown,
  globalOrigins: readonly string[],
): Promise<SubscriptionWrite> => {
  authorizeSubscriptions(principal, 'c');
  const { content } = parseSubscription(body);
  const subscriptionId = newId();
  const secret = randomToken();
  const { result } = await execute(ctx, async (uow) => {
    const tenant = await uow.load(tenantStream(principal.tenantId), tenantDecider);
    const origins = tenant.status === 'active' ? (tenant.subscriptionOrigins ?? []) : [];
    if (!endpointAllowed(String(content.endpoint), origins, globalOrigins))
      throw refuseEndpoint(String(content.endpoint));
    await uow.decide(
      subscriptionStream(subscriptionId),
      subscriptionDecider,
      {
        type: 'CreateSubscription',
        subscriptionId,
        tenantId: principal.tenantId,
        owner: principal.actor.id,
        resource: content,
        now: uow.now,
      },
      { fresh: true },
    );
    await uow.decide(
      subscriptionSecretStream(subscriptionId),
      subscriptionSecretDecider,
      { type: 'IssueSecret', subscriptionId, secret, now: uow.now },
      { fresh: true },
    );
    return liveState(await uow.load(subscriptionStream(subscriptionId), subscriptionDecider));
  });
  return { state: result, secret };
};

/** The subscription's state in the caller's tenant. @throws {DomainError} 404 elsewhere or unknown. */
const ownState = (state: Subscription, principal: Principal, id: string) => {
  if (state.status === 'none' || state.tenantId !== principal.tenantId)
    throw new DomainError('not_found', 'ResourceNotFound', `Subscription/${id} is not known`, undefined, {
      issueCode: 'not-found',
    });
  return state;
};

/**
 * Updates a Subscription (`status` off stops delivery; requested or active after off or error asks
 * for a new handshake). The secret stays.
 * @throws {DomainError} 403, 404 (another tenant's too), 410 deleted, 412 If-Match, 422 endpoint;
 *   {ResourceValidationError} 422.
 */
export const updateSubscription = async (
  ctx: CommandContext,
  principal: Principal,
  id: string,
  body: unknown,
  ifMatch: number | undefined,
  globalOrigins: readonly string[],
): Promise<SubscriptionWrite> => {
  authorizeSubscriptions(principal, 'u');
  const { content, status } = parseSubscription(body);
  const { result } = await execute(ctx, async (uow) => {
    ownState(await uow.load(subscriptionStream(id), subscriptionDecider), principal, id);
    const tenant = await uow.load(tenantStream(principal.tenantId), tenantDecider);
    const origins = tenant.status === 'active' ? (tenant.subscriptionOrigins ?? []) : [];
    if (!endpointAllowed(String(content.endpoint), origins, globalOrigins))
      throw refuseEndpoint(String(content.endpoint));
    await uow.decide(subscriptionStream(id), subscriptionDecider, {
      type: 'UpdateSubscription',
      resource: content,
      status,
      ifMatch,
      now: uow.now,
    });
    return liveState(await uow.load(subscriptionStream(id), subscriptionDecider));
  });
  return { state: result };
};

/** Deletes a Subscription: no more notifications are decided or delivered for it. @throws {DomainError} 403, 404, 412. */
export const deleteSubscription = async (
  ctx: CommandContext,
  principal: Principal,
  id: string,
  ifMatch: number | undefined,
): Promise<void> => {
  authorizeSubscriptions(principal, 'd');
  await execute(ctx, async (uow) => {
    ownState(await uow.load(subscriptionStream(id), subscriptionDecider), principal, id);
    await uow.decide(subscriptionStream(id), subscriptionDecider, {
      type: 'DeleteSubscription',
      ifMatch,
      now: uow.now,
    });
  });
};

/**
 * Records notifications decided from the log for one subscription (in log order). Events at or
 * before the last position decided on are skipped by the decider, so reading the log again after
 * a crash numbers nothing twice.
 */
export const recordNotifications = async (
  ctx: CommandContext,
  subscriptionId: string,
  notifications: readonly Omit<DecidedNotification, 'eventNumber'>[],
): Promise<void> => {
  await execute(ctx, (uow) =>
    uow.decide(subscriptionStream(subscriptionId), subscriptionDecider, {
      type: 'RecordNotifications',
      notifications,
      now: uow.now,
    }),
  );
};

/** Records the outcome of a delivery or handshake attempt on the subscription's stream. */
export const recordOutcome = async (
  ctx: CommandContext,
  subscriptionId: string,
  outcome:
    | { readonly type: 'activated' }
    | { readonly type: 'delivered'; readonly through: number; readonly attempt: number }
    | {
        readonly type: 'failed';
        readonly attempt: number;
        readonly error: string;
        readonly nextAttemptAt: string;
        readonly errorAfter: boolean;
      },
): Promise<void> => {
  await execute(ctx, (uow) =>
    uow.decide(
      subscriptionStream(subscriptionId),
      subscriptionDecider,
      outcome.type === 'activated'
        ? { type: 'RecordActivation', now: uow.now }
        : outcome.type === 'delivered'
          ? { type: 'RecordDelivery', through: outcome.through, attempt: outcome.attempt, now: uow.now }
          : {
              type: 'RecordFailure',
              attempt: outcome.attempt,
              error: outcome.error,
              nextAttemptAt: outcome.nextAttemptAt,
              errorAfter: outcome.errorAfter,
              now: uow.now,
            },
    ),
  );
};

/** The FHIR JSON of a Subscription's state (never with its secret; docs/interface.md "Subscriptions"). */
export const subscriptionResource = (
  state: {
    readonly subscriptionId: string;
    readonly status: string;
    readonly resource: Content;
    readonly version: number;
    readonly lastUpdated: string;
  },
  secret?: string,
): Record<string, unknown> => {
  const { extension, ...rest } = state.resource as { extension?: unknown[] } & Content;
  const extensions = [
    ...(Array.isArray(extension) ? extension : []),
    ...(secret ? [{ url: SUBSCRIPTION_SECRET_EXTENSION, valueString: secret }] : []),
  ];
  return {
    resourceType: 'Subscription',
    id: state.subscriptionId,
    meta: { versionId: String(state.version), lastUpdated: state.lastUpdated },
    ...(extensions.length > 0 ? { extension: extensions } : {}),
    status: state.status === 'deleted' ? 'off' : state.status,
    ...rest,
  };
};
