/**
 * The FHIR R5 data server on {fhir_base_url} (issue 3; docs/interface.md §1.4, §2.5–2.6, §4.3, §5.3,
 * §7, §9): the routes parse the request, authenticate the caller, call the application layer
 * (`commands/fhir.ts` for writes, `queries/fhir.ts` for reads) and map the result to HTTP.
 */
import Router from '@koa/router';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { erasePatient, erasureAuditEntity } from '../../commands/erasure.js';
import * as fhir from '../../commands/fhir.js';
import { execute } from '../../commands/handler.js';
import type { WriteResult } from '../../commands/resources.js';
import { transaction } from '../../commands/transaction.js';
import { DomainError } from '../../domain/decider.js';
import { isResourceType, type ResourceType } from '../../domain/fhir/resource.js';
import { authorizeErasure, type Principal } from '../../fhir/access.js';
import type { AuditEntity } from '../../fhir/audit-event.js';
import { writeOutcome } from '../../fhir/dropped.js';
import { compartmentOf, resourceIdIn, toFhirResource } from '../../fhir/references.js';
import { conditionalUpdateStatus, definitionOf, idOf, ifMatchOf } from '../../fhir/resources.js';
import { forgetExported } from '../../integration/export/sinks.js';
import { encodeCursor, readAuditEvent, searchAuditEvents } from '../../queries/audit.js';
import * as queries from '../../queries/fhir.js';
import { auditedWith, auditInline, noteAudit } from '../audit.js';
import { HttpError } from '../errors.js';
import { capabilityStatement } from './capability.js';
import { FHIR_JSON, requireFhirJson } from './media.js';
import { resolvePrincipal } from './principal.js';
import { mountSubscriptions } from './subscriptions.js';

/**
 * Sends one resource with its version headers (ETag, Last-Modified), honouring `Prefer: return=minimal`.
 * `resource` is the FHIR JSON, or its stored text (a read: sent as it is).
 */
const sendResource = (
  ctx: Context,
  status: number,
  resource: Record<string, unknown> | string,
  versionId: number,
  lastUpdated: string,
) => {
  ctx.status = status;
  ctx.set('ETag', `W/"${versionId}"`);
  ctx.set('Last-Modified', new Date(lastUpdated).toUTCString());
  ctx.type = FHIR_JSON;
  if (/return=minimal/.test(ctx.get('Prefer'))) ctx.body = '';
  else ctx.body = resource;
};

const written = (type: ResourceType, result: WriteResult) =>
  toFhirResource(type, result.id, result.versionId, result.lastUpdated, result.content);

/** The audit entity of a stored resource (a read-model row). */
const rowEntity = (row: {
  resourceType: ResourceType;
  id: number;
  patientId: number | null;
}): AuditEntity => ({
  reference: `${row.resourceType}/${row.id}`,
  patientId: row.patientId,
});

/** The audit entity of a written resource. */
const writtenEntity = (type: ResourceType, result: WriteResult): AuditEntity => ({
  reference: `${type}/${result.id}`,
  patientId: compartmentOf(type, result.id, result.content).patientId ?? null,
});

/** The audit entity of a resource read through its versions: its patient from the newest content. */
const versionsEntity = (
  type: ResourceType,
  id: number,
  versions: readonly { readonly resource?: Record<string, unknown> | undefined }[],
): AuditEntity => {
  const content = versions.find((v) => v.resource)?.resource;
  return {
    reference: `${type}/${id}`,
    patientId: content
      ? (compartmentOf(type, id, content).patientId ?? null)
      : type === 'Patient'
        ? id
        : null,
  };
};

/** What a transaction-response Bundle touched: each entry's resource, with its patient. */
const transactionEntities = (bundle: Record<string, unknown>): AuditEntity[] => {
  const entries = (bundle.entry ?? []) as {
    resource?: Record<string, unknown>;
    response: { location?: string };
  }[];
  return entries.flatMap((e) => {
    const reference = e.response.location?.split('/_history')[0];
    if (typeof reference !== 'string') return [];
    const r = e.resource;
    const patientId =
      r && isResourceType(String(r.resourceType))
        ? (compartmentOf(r.resourceType as ResourceType, Number(r.id), r).patientId ?? null)
        : null;
    return [{ reference, patientId }];
  });
};

/**
 * The parameters of `$erase`: a Parameters resource with `reason` (valueString, required) and
 * `force` (valueBoolean, default false).
 * @throws {HttpError} 400 for any other body.
 */
const erasureParameters = (body: unknown): { reason: string; force: boolean } => {
  const b = body as { resourceType?: unknown; parameter?: unknown } | null;
  const parameters =
    b && b.resourceType === 'Parameters' && Array.isArray(b.parameter) ? b.parameter : undefined;
  const named = (name: string) =>
    (parameters ?? []).find((p: unknown) => (p as { name?: unknown } | null)?.name === name) as
      | { valueString?: unknown; valueBoolean?: unknown }
      | undefined;
  const reason = named('reason')?.valueString;
  const force = named('force')?.valueBoolean ?? false;
  if (!parameters || typeof reason !== 'string' || typeof force !== 'boolean')
    throw new HttpError(
      400,
      'InvalidErasure',
      '$erase takes a Parameters resource with `reason` (valueString) and optionally `force` (valueBoolean)',
    );
  return { reason, force };
};

/** Builds the router of the data server (mounted at the path of {fhir_base_url}). */
export const fhirRouter = (casebook: Casebook): Router => {
  const router = new Router();
  const base = casebook.config.fhirUrl;
  const contextFor = (ctx: Context, principal: Principal) =>
    casebook.context({
      tenantId: principal.tenantId,
      actor: principal.actor,
      requestId: ctx.state.requestId as string,
    });

  router.get('/metadata', (ctx) => {
    ctx.type = FHIR_JSON;
    ctx.body = capabilityStatement(casebook.config.fhirUrl, casebook.clock());
  });

  router.post('/', async (ctx) => {
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, { interaction: 'transaction', action: 'E' });
    const { result, audited } = await execute(
      contextFor(ctx, principal),
      (uow) => transaction(uow, principal, ctx.request.body),
      {
        audit: auditInline(casebook, ctx, (r: Record<string, unknown>) => ({
          status: 200,
          note: { entities: transactionEntities(r) },
        })),
      },
    );
    auditedWith(ctx, audited);
    noteAudit(ctx, { entities: transactionEntities(result) });
    ctx.type = FHIR_JSON;
    ctx.body = result;
  });

  const search = async (ctx: Context, parameters: queries.SearchParams) => {
    const def = definitionOf(ctx.params.type!);
    const principal = await resolvePrincipal(ctx, casebook);
    const result = await queries.search(casebook.sql, principal, def, parameters);
    noteAudit(ctx, {
      interaction: 'search-type',
      action: 'R',
      entities: [...result.matches, ...result.included].map(rowEntity),
    });
    const entries = [
      ...result.matches.map((row) => ({
        fullUrl: `${base}/${row.resourceType}/${row.id}`,
        resource: row.resource,
        search: { mode: 'match' },
      })),
      ...result.included.map((row) => ({
        fullUrl: `${base}/${row.resourceType}/${row.id}`,
        resource: row.resource,
        search: { mode: 'include' },
      })),
    ];
    const page = (cursor: string | undefined) => selfUrl(def.type, { ...parameters, _cursor: cursor });
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      ...(result.total !== undefined ? { total: result.total } : {}),
      // FHIR R5 http.html#paging: self, first, previous, next (docs/interface.md §4.3 rule 10).
      link: [
        { relation: 'self', url: selfUrl(def.type, parameters) },
        { relation: 'first', url: page(undefined) },
        ...(result.previous ? [{ relation: 'previous', url: page(result.previous) }] : []),
        ...(result.next ? [{ relation: 'next', url: page(result.next) }] : []),
      ],
      // No empty arrays in FHIR JSON: an empty page has no `entry`.
      ...(entries.length > 0 ? { entry: entries } : {}),
    };
  };

  const selfUrl = (type: string, parameters: queries.SearchParams) => {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(parameters))
      for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value])
        query.append(name, v);
    const text = query.toString();
    return `${base}/${type}${text ? `?${text}` : ''}`;
  };

  // The audit trail (issue 14): read-only, for API clients with AuditEvent scopes.
  router.get('/AuditEvent', async (ctx) => {
    const principal = await resolvePrincipal(ctx, casebook);
    const params = ctx.query as queries.SearchParams;
    const page = await searchAuditEvents(casebook.sql, principal, params, () =>
      casebook.runner.waitForDeferred('audit-events'),
    );
    noteAudit(ctx, { interaction: 'search-type', action: 'R' });
    const link = (cursor?: string) => {
      const query = new URLSearchParams();
      for (const [name, value] of Object.entries(params))
        if (name !== '_cursor')
          for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value])
            query.append(name, v);
      if (!query.has('_count')) query.set('_count', String(page.count));
      if (cursor) query.set('_cursor', cursor);
      return `${base}/AuditEvent?${query.toString()}`;
    };
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      total: page.total,
      link: [
        { relation: 'self', url: link(params._cursor ? String(params._cursor) : undefined) },
        { relation: 'first', url: link() },
        ...(page.next ? [{ relation: 'next', url: link(encodeCursor(page.next)) }] : []),
      ],
      ...(page.auditEvents.length > 0
        ? {
            entry: page.auditEvents.map((resource) => ({
              fullUrl: `${base}/AuditEvent/${String(resource.id)}`,
              resource,
              search: { mode: 'match' },
            })),
          }
        : {}),
    };
  });
  router.get('/AuditEvent/:id', async (ctx) => {
    const principal = await resolvePrincipal(ctx, casebook);
    const resource = await readAuditEvent(casebook.sql, principal, ctx.params.id ?? '', () =>
      casebook.runner.waitForDeferred('audit-events'),
    );
    noteAudit(ctx, {
      interaction: 'read',
      action: 'R',
      entities: [{ reference: `AuditEvent/${ctx.params.id}` }],
    });
    ctx.type = FHIR_JSON;
    ctx.body = resource;
  });
  const auditIsReadOnly = () => {
    throw new HttpError(
      405,
      'MethodNotAllowed',
      'AuditEvents are recorded by casebook itself and cannot be written',
      {
        Allow: 'GET',
      },
    );
  };
  router.post('/AuditEvent', auditIsReadOnly);
  router.put('/AuditEvent/:id', auditIsReadOnly);
  router.delete('/AuditEvent/:id', auditIsReadOnly);

  // FHIR R5 Subscriptions and SubscriptionTopics (issue 37), before the generic routes.
  mountSubscriptions(router, casebook);

  // Erasure (docs/architecture.md "Erasure"; docs/interface.md): the patient's data key destroyed,
  // its read-model rows made tombstones (410 Gone), a PHI-free PatientErased recorded. Only with
  // system/Patient.d; a Parameters body with `reason` (valueString) and optionally `force`
  // (valueBoolean).
  router.post('/Patient/:id/$erase', async (ctx) => {
    const id = idOf('Patient', ctx.params.id);
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    authorizeErasure(principal);
    const { reason, force } = erasureParameters(ctx.request.body);
    // Who, when and why (docs/interface.md §4.3 rule 17), appended with the PatientErased event.
    noteAudit(ctx, {
      interaction: 'operation',
      action: 'D',
      entities: [erasureAuditEntity(id, reason, force === true)],
    });
    const outcome = await erasePatient(
      contextFor(ctx, principal),
      casebook.keys,
      { patientId: id, reason, force },
      { audit: auditInline(casebook, ctx, () => ({ status: 200, note: {} })) },
    );
    auditedWith(ctx, outcome.audited);
    await forgetExported(casebook.config.exportSink, outcome.exportKeys);
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'OperationOutcome',
      issue: [
        {
          severity: 'information',
          code: 'informational',
          diagnostics: outcome.already
            ? `Patient/${id} was erased before; its data key is destroyed`
            : `Patient/${id} erased with ${outcome.erased.length - 1} other resources of its compartment`,
        },
      ],
    };
  });

  // FHIR R5 Patient $everything (issue 14): the patient's whole record, paged.
  router.get('/Patient/:id/$everything', async (ctx) => {
    const id = idOf('Patient', ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    const params = ctx.query as queries.SearchParams;
    const page = await queries.everything(casebook.sql, principal, id, params);
    noteAudit(ctx, { interaction: 'operation', action: 'R', entities: page.rows.map(rowEntity) });
    const link = (cursor?: string) => {
      const query = new URLSearchParams();
      const count = params._count;
      if (count !== undefined) query.set('_count', String(Array.isArray(count) ? count[0] : count));
      if (cursor) query.set('_cursor', cursor);
      const text = query.toString();
      return `${base}/Patient/${id}/$everything${text ? `?${text}` : ''}`;
    };
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      total: page.total,
      link: [
        { relation: 'self', url: link(params._cursor ? String(params._cursor) : undefined) },
        { relation: 'first', url: link() },
        ...(page.next ? [{ relation: 'next', url: link(page.next) }] : []),
      ],
      ...(page.rows.length > 0
        ? {
            entry: page.rows.map((row) => ({
              fullUrl: `${base}/${row.resourceType}/${row.id}`,
              resource: row.resource,
              search: { mode: 'match' },
            })),
          }
        : {}),
    };
  });

  router.get('/:type', (ctx) => search(ctx, ctx.query));
  // FHIR search by POST: form-encoded parameters (and any in the query string).
  router.post('/:type/_search', (ctx) => {
    if (!ctx.is('application/x-www-form-urlencoded'))
      throw new HttpError(
        415,
        'UnsupportedMediaType',
        'POST _search takes application/x-www-form-urlencoded parameters',
      );
    return search(ctx, { ...ctx.query, ...(ctx.request.body as Record<string, string | string[]>) });
  });
  /** A history Bundle (FHIR R5 http.html#history) of one page, with self, first, previous and next links. */
  const historyBundle = (path: string, query: queries.SearchParams, page: queries.HistoryPage) => {
    const url = (cursor: string | undefined) => {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(query))
        if (name !== '_cursor')
          for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value])
            params.append(name, v);
      if (cursor) params.set('_cursor', cursor);
      const text = params.toString();
      return `${base}${path}${text ? `?${text}` : ''}`;
    };
    const self = typeof query._cursor === 'string' ? query._cursor : undefined;
    const entries = page.versions.map((v) => ({
      fullUrl: `${base}/${v.resourceType}/${v.id}`,
      ...(v.resource ? { resource: v.resource } : {}),
      request: { method: v.method, url: v.method === 'POST' ? v.resourceType : `${v.resourceType}/${v.id}` },
      response: {
        status: v.method === 'POST' ? '201 Created' : v.method === 'PUT' ? '200 OK' : '204 No Content',
        etag: `W/"${v.versionId}"`,
        lastModified: v.at,
      },
    }));
    return {
      resourceType: 'Bundle',
      type: 'history',
      ...(page.total !== undefined ? { total: page.total } : {}),
      link: [
        { relation: 'self', url: url(self) },
        { relation: 'first', url: url(undefined) },
        ...(page.previous ? [{ relation: 'previous', url: url(page.previous) }] : []),
        ...(page.next ? [{ relation: 'next', url: url(page.next) }] : []),
      ],
      ...(entries.length > 0 ? { entry: entries } : {}),
    };
  };

  // Type-level history (issue 13/14): every resource of the type the caller may read, paged by
  // resource; `_at` gives each one's version current at that instant.
  router.get('/:type/_history', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, { interaction: 'history-type', action: 'R' });
    const query = ctx.query as queries.SearchParams;
    const page = await queries.typeHistory(casebook.sql, casebook.store, principal, def, query);
    noteAudit(ctx, {
      entities: [...new Set(page.versions.map((v) => v.id))].map((id) =>
        versionsEntity(
          def.type,
          id,
          page.versions.filter((v) => v.id === id),
        ),
      ),
    });
    ctx.type = FHIR_JSON;
    ctx.body = historyBundle(`/${def.type}/_history`, query, page);
  });

  router.post('/:type', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const ifNoneExist = ctx.get('If-None-Exist');
    const body = ctx.request.body;
    const { result, audited } = await execute(
      contextFor(ctx, principal),
      (uow) =>
        ifNoneExist
          ? fhir.conditionalCreate(
              uow,
              principal,
              def,
              fhir.ifNoneExistToken(ifNoneExist, 'If-None-Exist'),
              body,
              'If-None-Exist',
            )
          : fhir.create(uow, principal, def, body),
      {
        audit: auditInline(casebook, ctx, (r: WriteResult) => ({
          status: r.created ? 201 : 200,
          note: { interaction: 'create', entities: [writtenEntity(def.type, r)] },
        })),
      },
    );
    auditedWith(ctx, audited);
    noteAudit(ctx, { interaction: 'create', entities: [writtenEntity(def.type, result)] });
    // FHIR conditional create: a match answers 200 with the existing resource.
    if (!result.created) {
      sendResource(ctx, 200, written(def.type, result), result.versionId, result.lastUpdated);
      return;
    }
    ctx.set('Location', `${base}/${def.type}/${result.id}/_history/${result.versionId}`);
    sendResource(ctx, 201, written(def.type, result), result.versionId, result.lastUpdated);
    // FHIR R5 http.html#ops `Prefer: return=OperationOutcome` (issue 35): the outcome names every
    // element sent that was not stored (docs/interface.md §4.3 rule 13).
    if (/return=OperationOutcome/i.test(ctx.get('Prefer')))
      ctx.body = writeOutcome(def.type, body, result.content);
  });

  router.put('/:type', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const identifier = ctx.query.identifier;
    if (Array.isArray(identifier))
      throw new DomainError('invalid', 'RepeatedSearchParameter', 'give identifier once', 'identifier');
    const others = Object.keys(ctx.query).filter(
      (k) => k !== 'identifier' && k !== '_format' && k !== '_pretty',
    );
    if (others.length)
      throw new HttpError(
        400,
        'UnsupportedCondition',
        `conditional update supports identifier only, not ${others.join(', ')}`,
      );
    const body = ctx.request.body;
    const { result, audited } = await execute(
      contextFor(ctx, principal),
      (uow) => fhir.conditionalUpdate(uow, principal, def, identifier, body),
      {
        audit: auditInline(casebook, ctx, (r: WriteResult) => ({
          status: conditionalUpdateStatus(def.type, r.created),
          note: { interaction: 'update', entities: [writtenEntity(def.type, r)] },
        })),
      },
    );
    auditedWith(ctx, audited);
    noteAudit(ctx, { interaction: 'update', entities: [writtenEntity(def.type, result)] });
    ctx.set('Location', `${base}/${def.type}/${result.id}/_history/${result.versionId}`);
    const status = conditionalUpdateStatus(def.type, result.created);
    sendResource(ctx, status, written(def.type, result), result.versionId, result.lastUpdated);
  });

  router.get('/:type/:id', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    const row = await queries.read(casebook.sql, principal, def, id);
    noteAudit(ctx, { interaction: 'read', entities: [rowEntity(row)] });
    sendResource(ctx, 200, row.json ?? row.resource, row.versionId, row.lastUpdated.toISOString());
  });

  router.put('/:type/:id', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const ifMatch = ifMatchOf(ctx.get('If-Match') || undefined);
    const body = ctx.request.body;
    const { result, audited } = await execute(
      contextFor(ctx, principal),
      (uow) => fhir.update(uow, principal, def, id, body, ifMatch),
      {
        audit: auditInline(casebook, ctx, (r: WriteResult) => ({
          status: 200,
          note: { interaction: 'update', entities: [writtenEntity(def.type, r)] },
        })),
      },
    );
    auditedWith(ctx, audited);
    noteAudit(ctx, { interaction: 'update', entities: [writtenEntity(def.type, result)] });
    sendResource(ctx, 200, written(def.type, result), result.versionId, result.lastUpdated);
  });

  router.delete('/:type/:id', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    const ifMatch = ifMatchOf(ctx.get('If-Match') || undefined);
    const { result, audited } = await execute(
      contextFor(ctx, principal),
      (uow) => fhir.remove(uow, principal, def, id, ifMatch),
      {
        audit: auditInline(casebook, ctx, (r: { readonly patientId: number | null }) => ({
          status: 204,
          note: { entities: [{ reference: `${def.type}/${id}`, patientId: r.patientId }] },
        })),
      },
    );
    auditedWith(ctx, audited);
    noteAudit(ctx, { entities: [{ reference: `${def.type}/${id}`, patientId: result.patientId }] });
    ctx.status = 204;
  });

  router.get('/:type/:id/_history', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, { interaction: 'history-instance', action: 'R' });
    const query = ctx.query as queries.SearchParams;
    const page = await queries.instanceHistory(casebook.sql, casebook.store, principal, def, id, query);
    noteAudit(ctx, { entities: [versionsEntity(def.type, id, page.versions)] });
    ctx.type = FHIR_JSON;
    ctx.body = historyBundle(`/${def.type}/${id}/_history`, query, page);
  });

  router.get('/:type/:id/_history/:vid', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    noteAudit(ctx, { interaction: 'vread', action: 'R' });
    const version = await queries.vread(
      casebook.sql,
      casebook.store,
      principal,
      def,
      id,
      resourceIdIn(ctx.params.vid ?? ''),
    );
    noteAudit(ctx, { entities: [versionsEntity(def.type, id, [version])] });
    sendResource(ctx, 200, version.resource, version.versionId, version.at);
  });

  return router;
};
