/**
 * FHIR R5 topic-based Subscriptions on {fhir_base_url} (issue 37; docs/interface.md
 * "Subscriptions"): the SubscriptionTopics casebook publishes, Subscription create, read, update,
 * delete and search for API clients with `system/Subscription.*` scopes in their tenant, and the
 * operations `$status` and `$events`. The routes parse, authenticate, call `commands/subscriptions.ts`
 * or `queries/subscriptions.ts`, and map the result to HTTP.
 */
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import {
  authorizeSubscriptions,
  createSubscription,
  deleteSubscription,
  subscriptionResource,
  updateSubscription,
} from '../../commands/subscriptions.js';
import { DomainError } from '../../domain/decider.js';
import { TOPICS, type TopicDefinition } from '../../domain/subscription/topics.js';
import type { Principal } from '../../fhir/access.js';
import { ifMatchOf } from '../../fhir/resources.js';
import { notificationBundle } from '../../integration/subscriptions/notification.js';
import { readNotifications, readSubscriptions, type SubscriptionRow } from '../../queries/subscriptions.js';
import { noteAudit } from '../audit.js';
import { FHIR_JSON, requireFhirJson } from './media.js';
import { resolvePrincipal } from './principal.js';

/** Most notifications one `$events` answer holds. */
const MAX_EVENTS_PER_ANSWER = 100;

/** The FHIR JSON of a published topic (FHIR R5 subscriptiontopic.html). */
export const topicResource = (topic: TopicDefinition, now: Date): Record<string, unknown> => ({
  resourceType: 'SubscriptionTopic',
  id: topic.id,
  url: topic.url,
  version: '1',
  title: topic.title,
  status: 'active',
  date: now.toISOString().slice(0, 10),
  description: topic.description,
  resourceTrigger: [
    {
      description: topic.description,
      resource: topic.resource,
      supportedInteraction: topic.resource === 'Task' ? ['update'] : ['create', 'update'],
      ...(topic.statuses
        ? {
            queryCriteria: { current: `status=${topic.statuses.join(',')}`, resultForCreate: 'test-passes' },
            fhirPathCriteria: `%current.status in (${topic.statuses.map((s) => `'${s}'`).join(' | ')})`,
          }
        : { fhirPathCriteria: '%previous.status != %current.status' }),
    },
  ],
  canFilterBy: topic.canFilterBy.map((filterParameter) => ({
    resource: topic.resource,
    filterParameter,
    description: `Notifications whose ${topic.resource} has this ${filterParameter} (comma-separated alternatives).`,
  })),
  notificationShape: [{ resource: topic.resource }],
});

const notFound = (what: string) =>
  new DomainError('not_found', 'ResourceNotFound', `${what} is not known`, undefined, {
    issueCode: 'not-found',
  });

/** R5 Subscription status of a read-model row (a deleted one reads as gone before this). */
const rowState = (row: SubscriptionRow) => ({
  subscriptionId: row.id,
  status: row.status,
  resource: row.resource,
  version: row.version,
  lastUpdated: row.lastUpdated.toISOString(),
});

/** A non-negative integer query parameter, or undefined. @throws {DomainError} 400 otherwise. */
const numberParam = (ctx: Context, name: string): number | undefined => {
  const raw = ctx.query[name];
  if (raw === undefined) return undefined;
  const text = Array.isArray(raw) ? raw[0] : raw;
  if (typeof text !== 'string' || !/^\d{1,9}$/.test(text))
    throw new DomainError('invalid', 'InvalidParameter', `${name} must be a non-negative integer`, name);
  return Number(text);
};

/** Mounts the Subscription and SubscriptionTopic routes on the data server's router (before its generic ones). */
export const mountSubscriptions = (router: Router, casebook: Casebook): void => {
  const base = casebook.config.fhirUrl;
  const contextFor = (ctx: Context, principal: Principal) =>
    casebook.context({
      tenantId: principal.tenantId,
      actor: principal.actor,
      requestId: ctx.state.requestId as string,
    });
  const send = (ctx: Context, status: number, resource: Record<string, unknown>, version: number) => {
    ctx.status = status;
    ctx.set('ETag', `W/"${version}"`);
    ctx.type = FHIR_JSON;
    ctx.body = resource;
  };
  /** The caller's tenant's live (not deleted) subscription. @throws {DomainError} 404. */
  const own = async (principal: Principal, id: string): Promise<SubscriptionRow> => {
    const [row] = await readSubscriptions(casebook.sql, { tenantId: principal.tenantId, id });
    if (!row) throw notFound(`Subscription/${id}`);
    return row;
  };

  router.get('/SubscriptionTopic', async (ctx) => {
    await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, { interaction: 'search-type', action: 'R' });
    const now = casebook.clock();
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      total: TOPICS.length,
      link: [{ relation: 'self', url: `${base}/SubscriptionTopic` }],
      entry: TOPICS.map((t) => ({
        fullUrl: `${base}/SubscriptionTopic/${t.id}`,
        resource: topicResource(t, now),
        search: { mode: 'match' },
      })),
    };
  });
  router.get('/SubscriptionTopic/:id', async (ctx) => {
    await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, {
      interaction: 'read',
      action: 'R',
      entities: [{ reference: `SubscriptionTopic/${ctx.params.id}` }],
    });
    const topic = TOPICS.find((t) => t.id === ctx.params.id);
    if (!topic) throw notFound(`SubscriptionTopic/${ctx.params.id}`);
    ctx.type = FHIR_JSON;
    ctx.body = topicResource(topic, casebook.clock());
  });

  router.post('/Subscription', async (ctx) => {
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, { interaction: 'create', action: 'C' });
    const { state, secret } = await createSubscription(
      contextFor(ctx, principal),
      principal,
      ctx.request.body,
      casebook.config.subscriptions.allowedOrigins,
    );
    noteAudit(ctx, { entities: [{ reference: `Subscription/${state.subscriptionId}` }] });
    ctx.set('Location', `${base}/Subscription/${state.subscriptionId}/_history/${state.version}`);
    ctx.set('Cache-Control', 'no-store');
    send(ctx, 201, subscriptionResource(state, secret), state.version);
  });

  router.get('/Subscription', async (ctx) => {
    const principal = await resolvePrincipal(ctx, casebook);
    authorizeSubscriptions(principal, 's');
    noteAudit(ctx, { interaction: 'search-type', action: 'R' });
    const status = typeof ctx.query.status === 'string' ? ctx.query.status.split(',') : undefined;
    const rows = (await readSubscriptions(casebook.sql, { tenantId: principal.tenantId })).filter(
      (r) => !status || status.includes(r.status),
    );
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      total: rows.length,
      link: [
        { relation: 'self', url: `${base}/Subscription${ctx.querystring ? `?${ctx.querystring}` : ''}` },
      ],
      ...(rows.length > 0
        ? {
            entry: rows.map((r) => ({
              fullUrl: `${base}/Subscription/${r.id}`,
              resource: subscriptionResource(rowState(r)),
              search: { mode: 'match' },
            })),
          }
        : {}),
    };
  });

  router.get('/Subscription/:id', async (ctx) => {
    const principal = await resolvePrincipal(ctx, casebook);
    authorizeSubscriptions(principal, 'r');
    noteAudit(ctx, {
      interaction: 'read',
      action: 'R',
      entities: [{ reference: `Subscription/${ctx.params.id}` }],
    });
    const row = await own(principal, ctx.params.id!);
    send(ctx, 200, subscriptionResource(rowState(row)), row.version);
  });

  router.put('/Subscription/:id', async (ctx) => {
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, {
      interaction: 'update',
      action: 'U',
      entities: [{ reference: `Subscription/${ctx.params.id}` }],
    });
    const { state } = await updateSubscription(
      contextFor(ctx, principal),
      principal,
      ctx.params.id!,
      ctx.request.body,
      ifMatchOf(ctx.get('If-Match') || undefined),
      casebook.config.subscriptions.allowedOrigins,
    );
    send(ctx, 200, subscriptionResource(state), state.version);
  });

  router.delete('/Subscription/:id', async (ctx) => {
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, {
      interaction: 'delete',
      action: 'D',
      entities: [{ reference: `Subscription/${ctx.params.id}` }],
    });
    await deleteSubscription(
      contextFor(ctx, principal),
      principal,
      ctx.params.id!,
      ifMatchOf(ctx.get('If-Match') || undefined),
    );
    ctx.status = 204;
  });

  // FHIR R5 Subscription $status: a searchset Bundle with the SubscriptionStatus (query-status).
  const status = async (ctx: Context) => {
    const principal = await resolvePrincipal(ctx, casebook);
    authorizeSubscriptions(principal, 'r');
    noteAudit(ctx, {
      interaction: 'operation',
      action: 'R',
      entities: [{ reference: `Subscription/${ctx.params.id}` }],
    });
    const row = await own(principal, ctx.params.id!);
    const notification = notificationBundle({
      base,
      subscriptionId: row.id,
      topic: String(row.resource.topic),
      status: row.status,
      type: 'query-status',
      eventsSinceSubscriptionStart: row.eventsSince,
      content: 'empty',
      events: [],
      now: casebook.clock().toISOString(),
      error: row.lastError ?? undefined,
    });
    const subscriptionStatus = (notification.entry as { resource: unknown }[])[0]!.resource;
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      total: 1,
      entry: [
        {
          fullUrl: `urn:uuid:${crypto.randomUUID()}`,
          resource: subscriptionStatus,
          search: { mode: 'match' },
        },
      ],
    };
  };
  router.get('/Subscription/:id/$status', status);
  router.post('/Subscription/:id/$status', status);

  // FHIR R5 Subscription $events: past notifications replayed from the log by event number.
  const events = async (ctx: Context) => {
    const principal = await resolvePrincipal(ctx, casebook);
    authorizeSubscriptions(principal, 'r');
    noteAudit(ctx, {
      interaction: 'operation',
      action: 'R',
      entities: [{ reference: `Subscription/${ctx.params.id}` }],
    });
    const row = await own(principal, ctx.params.id!);
    const until = Math.min(numberParam(ctx, 'eventsUntilNumber') ?? row.eventsSince, row.eventsSince);
    const since = Math.max(1, numberParam(ctx, 'eventsSinceNumber') ?? until - MAX_EVENTS_PER_ANSWER + 1);
    const last = Math.min(until, since + MAX_EVENTS_PER_ANSWER - 1);
    const contentParam = typeof ctx.query.content === 'string' ? ctx.query.content : undefined;
    if (contentParam && !['empty', 'id-only', 'full-resource'].includes(contentParam))
      throw new DomainError(
        'invalid',
        'InvalidParameter',
        'content must be empty, id-only or full-resource',
        'content',
      );
    const configured =
      (row.resource.content as 'empty' | 'id-only' | 'full-resource' | undefined) ?? 'id-only';
    // A replay never carries more than the subscription itself would.
    const rank = { empty: 0, 'id-only': 1, 'full-resource': 2 } as const;
    const content =
      contentParam && rank[contentParam as keyof typeof rank] < rank[configured]
        ? (contentParam as keyof typeof rank)
        : configured;
    const notifications = await readNotifications(casebook, row, since, last);
    ctx.type = FHIR_JSON;
    ctx.body = notificationBundle({
      base,
      subscriptionId: row.id,
      topic: String(row.resource.topic),
      status: row.status,
      type: 'query-event',
      eventsSinceSubscriptionStart: row.eventsSince,
      content,
      events: notifications,
      now: casebook.clock().toISOString(),
    });
  };
  router.get('/Subscription/:id/$events', events);
  router.post('/Subscription/:id/$events', events);
};
