/**
 * The FHIR R5 data server on {fhir_base_url} (issue 3; spec §1.4, §2.5–2.6, §4.3, §5.3, §7, §9):
 * create, read, vread, update, conditional update, delete, history and search for Patient,
 * Encounter, Practitioner, Task, Questionnaire and QuestionnaireResponse; the transaction Bundle;
 * the CapabilityStatement. Writes are commands on the event log; reads come from the read model
 * (history and vread fold the resource's stream).
 */
import Router from '@koa/router';
import type { Context } from 'koa';
import { ZodError } from 'zod';
import type { Casebook } from '../../casebook.js';
import type { CommandContext } from '../../commands/context.js';
import {
  conditionalUpdate,
  createResource,
  deleteResource,
  updateResource,
  type WriteResult,
} from '../../commands/resources.js';
import { DomainError } from '../../domain/decider.js';
import {
  type ChangedData,
  type Content,
  type CreatedData,
  isResourceType,
  type ResourceType,
  resourceEventKind,
  resourceStream,
} from '../../domain/fhir/resource.js';
import { type AccessTarget, authorize, isAllowed, mayAtAll, type Principal } from '../../fhir/access.js';
import type { ResourceDefinition } from '../../fhir/definitions.js';
import { compartmentOf, toFhirResource } from '../../fhir/references.js';
import {
  type ResourceQuery,
  type ResourceRow,
  readResource,
  referencingResources,
  searchResources,
} from '../../projections/resources.js';
import { HttpError } from '../errors.js';
import { capabilityStatement } from './capability.js';
import { DEFINITIONS } from './definitions.js';
import { ResourceValidationError } from './outcome.js';
import { resolvePrincipal } from './principal.js';
import { SEARCH_PARAMETERS, type SearchParameter } from './search.js';
import { transaction } from './transaction.js';

export const FHIR_JSON = 'application/fhir+json';

/** Tag system naming a Questionnaire's project on create (spec §5.3 rule 3). */
export const PROJECT_TAG_SYSTEM = 'https://casebook.dev/fhir/CodeSystem/project';

/** The definition of the `:type` path segment. @throws {HttpError} 404 for other types. */
export const definitionOf = (type: string): ResourceDefinition => {
  if (!isResourceType(type))
    throw new DomainError(
      'not_found',
      'UnsupportedResourceType',
      `resource type ${type} is not supported by this server`,
      undefined,
      {
        issueCode: 'not-supported',
      },
    );
  return DEFINITIONS[type];
};

/** `:id` as an integer. @throws {DomainError} 404 when it is not one (ids are integers, spec §2.1). */
export const idOf = (type: string, raw: string | undefined): number => {
  if (!raw || !/^\d{1,10}$/.test(raw) || Number(raw) > 2_147_483_647)
    throw new DomainError(
      'not_found',
      'ResourceNotFound',
      `${type}/${raw ?? ''} is not known (ids are integers)`,
      undefined,
      {
        issueCode: 'not-found',
      },
    );
  return Number(raw);
};

/**
 * Parses a request body as a resource of `def.type`.
 * @throws {DomainError} 400 when it is not a JSON object of that resourceType;
 *   {ResourceValidationError} 422 with one issue per problem.
 */
export const parseResource = (def: ResourceDefinition, body: unknown, mode: 'create' | 'update'): Content => {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw new DomainError('invalid', 'InvalidBody', `the body must be a ${def.type} resource (JSON object)`);
  const resourceType = (body as { resourceType?: unknown }).resourceType;
  if (resourceType !== def.type)
    throw new DomainError(
      'invalid',
      'WrongResourceType',
      `resourceType must be ${def.type}, not ${JSON.stringify(resourceType ?? null)}`,
      'resourceType',
    );
  try {
    return def.parse(body, mode);
  } catch (error) {
    if (error instanceof ZodError) throw new ResourceValidationError(def.type, error, body);
    throw error;
  }
};

/** `If-Match: W/"3"` → 3; undefined without the header. @throws {DomainError} 400 when malformed. */
export const ifMatchOf = (header: string | undefined): number | undefined => {
  if (!header) return undefined;
  const match = /^(?:W\/)?"(\d+)"$/.exec(header.trim());
  if (!match)
    throw new DomainError(
      'invalid',
      'InvalidIfMatch',
      `If-Match must be a version ETag such as W/"3", not ${header}`,
    );
  return Number(match[1]);
};

/** The scope-relevant facts of a stored resource. */
export const targetOf = (row: ResourceRow): AccessTarget => ({
  resourceType: row.resourceType,
  id: row.id,
  patientId: row.patientId,
  author: row.author,
  project: row.project,
  content: row.resource,
});

/** The scope-relevant facts of content about to be written. */
const targetOfContent = (
  type: ResourceType,
  id: number | undefined,
  content: Content,
  extra: { author?: string | null; project?: string | null },
): AccessTarget => ({
  resourceType: type,
  ...(id !== undefined ? { id } : {}),
  patientId:
    compartmentOf(type, id ?? 0, content).patientId ?? (type === 'Patient' && id !== undefined ? id : null),
  author: extra.author ?? null,
  project: extra.project ?? null,
  content,
});

/**
 * Refuses a request body that is not FHIR JSON (issue 3: accept application/fhir+json and
 * application/json). Shared by the data server and the form backend.
 * @throws {HttpError} 415.
 */
export const requireFhirJson = (ctx: Context): void => {
  if (!ctx.is('application/fhir+json', 'application/json'))
    throw new HttpError(
      415,
      'UnsupportedMediaType',
      'send the resource as application/fhir+json (or application/json)',
    );
};

/** Sends one resource with its version headers (ETag, Last-Modified), honouring `Prefer: return=minimal`. */
const sendResource = (
  ctx: Context,
  status: number,
  resource: Record<string, unknown>,
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

/** The project a new Questionnaire belongs to: its meta.tag, or the caller's only project. */
const projectOf = (principal: Principal, body: unknown): string => {
  const tags = ((body as { meta?: { tag?: unknown } }).meta?.tag ?? []) as {
    system?: unknown;
    code?: unknown;
  }[];
  const tagged = Array.isArray(tags) ? tags.find((t) => t?.system === PROJECT_TAG_SYSTEM)?.code : undefined;
  if (typeof tagged === 'string') return tagged;
  if (principal.projects.length === 1) return principal.projects[0]!;
  throw new DomainError(
    'unprocessable',
    'ProjectRequired',
    `name the Questionnaire's project in meta.tag (system ${PROJECT_TAG_SYSTEM}); the caller has ${principal.projects.length} projects`,
    'Questionnaire.meta.tag',
    { issueCode: 'required' },
  );
};

/** Parses `identifier=system|value` (token). */
export const tokenOf = (raw: string): { system: string | undefined; value: string } => {
  const bar = raw.indexOf('|');
  return bar < 0
    ? { system: undefined, value: raw }
    : { system: raw.slice(0, bar), value: raw.slice(bar + 1) };
};

export interface FhirHandlers {
  create(
    ctx: CommandContext,
    principal: Principal,
    def: ResourceDefinition,
    body: unknown,
  ): Promise<WriteResult>;
  update(
    ctx: CommandContext,
    principal: Principal,
    def: ResourceDefinition,
    id: number,
    body: unknown,
    ifMatch?: number,
  ): Promise<WriteResult>;
  conditionalUpdate(
    ctx: CommandContext,
    principal: Principal,
    def: ResourceDefinition,
    identifier: string | undefined,
    body: unknown,
  ): Promise<WriteResult>;
  remove(
    ctx: CommandContext,
    principal: Principal,
    def: ResourceDefinition,
    id: number,
    ifMatch?: number,
  ): Promise<void>;
}

/**
 * The write interactions with their scope checks, shared by the REST routes and the transaction
 * Bundle (which checks every entry the same way).
 */
export const fhirHandlers = (): FhirHandlers => {
  const existing = async (ctx: CommandContext, principal: Principal, def: ResourceDefinition, id: number) => {
    const row = await readResource(ctx.sql, def.type, id, principal.tenantId);
    if (!row)
      throw new DomainError('not_found', 'ResourceNotFound', `${def.type}/${id} is not known`, undefined, {
        issueCode: 'not-found',
      });
    return row;
  };
  const handlers: FhirHandlers = {
    async create(ctx, principal, def, body) {
      const content = parseResource(def, body, 'create');
      const project = def.type === 'Questionnaire' ? projectOf(principal, body) : undefined;
      const author = principal.userRef ?? undefined;
      authorize(
        principal,
        'c',
        targetOfContent(def.type, undefined, content, { author: author ?? null, project: project ?? null }),
      );
      return createResource(ctx, def, principal.tenantId, content, {
        ...(project !== undefined ? { project } : {}),
        ...(author !== undefined ? { author } : {}),
      });
    },
    async update(ctx, principal, def, id, body, ifMatch) {
      const content = parseResource(def, body, def.partialUpdate ? 'update' : 'create');
      const bodyId = (body as { id?: unknown }).id;
      if (bodyId !== undefined && String(bodyId) !== String(id))
        throw new DomainError(
          'invalid',
          'IdMismatch',
          `the body's id ${JSON.stringify(bodyId)} differs from the URL's ${id}`,
          `${def.type}.id`,
        );
      const row = await existing(ctx, principal, def, id);
      if (row.deleted)
        throw new DomainError('gone', 'ResourceDeleted', `${def.type}/${id} was deleted`, undefined, {
          issueCode: 'deleted',
        });
      authorize(principal, 'u', targetOf(row));
      const next = def.partialUpdate ? { ...stripMeta(row.resource), ...content } : content;
      authorize(
        principal,
        'u',
        targetOfContent(def.type, id, next, { author: row.author, project: row.project }),
      );
      return updateResource(
        ctx,
        def,
        principal.tenantId,
        id,
        content,
        ifMatch !== undefined ? { ifMatch } : {},
      );
    },
    async conditionalUpdate(ctx, principal, def, identifier, body) {
      // spec §4.3 rule 2, §7: conditional update needs the identifier query parameter.
      if (!identifier)
        throw new DomainError(
          'unprocessable',
          'IdentifierRequired',
          `conditional update needs ?identifier=system|value (PUT ${def.type}?identifier=…)`,
          'identifier',
          { issueCode: 'required' },
        );
      const token = tokenOf(identifier);
      const content = parseResource(def, body, def.partialUpdate ? 'update' : 'create');
      const matches = await searchResources(ctx.sql, def.type, principal.tenantId, {
        identifiers: [token],
        limit: 2,
      });
      if (matches.length > 1)
        throw new DomainError(
          'precondition_failed',
          'MultipleMatches',
          `identifier=${identifier} matches more than one ${def.type}`,
          'identifier',
          {
            issueCode: 'multiple-matches',
          },
        );
      const match = matches[0];
      // A Questionnaire created here belongs to a project like one created by POST (spec §5.3 rule 3).
      const project = !match && def.type === 'Questionnaire' ? projectOf(principal, body) : null;
      if (match) {
        authorize(principal, 'u', targetOf(match));
        if (token.system === undefined || token.system === '')
          return updateResource(ctx, def, principal.tenantId, match.id, content, { mergeIdentifiers: true });
      } else {
        if (token.system === undefined || token.system === '')
          throw new DomainError(
            'unprocessable',
            'IdentifierSystemRequired',
            `no ${def.type} matches; to create one the identifier needs a system (identifier=system|value)`,
            'identifier',
            { issueCode: 'required' },
          );
        authorize(
          principal,
          'c',
          targetOfContent(def.type, undefined, content, { author: principal.userRef, project }),
        );
      }
      const author = principal.userRef ?? undefined;
      return conditionalUpdate(
        ctx,
        def,
        principal.tenantId,
        { system: token.system!, value: token.value },
        content,
        { ...(author ? { author } : {}), ...(project !== null ? { project } : {}) },
        // Creating validates like a create (required elements), not like a partial update.
        () => parseResource(def, body, 'create'),
      );
    },
    async remove(ctx, principal, def, id, ifMatch) {
      const row = await existing(ctx, principal, def, id);
      authorize(principal, 'd', targetOf(row));
      // spec §4.3 rule 4: refused while live resources reference it (read model caught up first).
      const head = await ctx.store.headPosition();
      if (head) await ctx.waitForProjections(head);
      const column = def.type === 'Patient' ? 'patient_id' : 'encounter_id';
      await deleteResource(
        ctx,
        def,
        principal.tenantId,
        id,
        () => referencingResources(ctx.sql, principal.tenantId, column, id, def.deleteBlockedBy),
        ifMatch !== undefined ? { ifMatch } : {},
      );
    },
  };
  return handlers;
};

const stripMeta = (resource: Record<string, unknown>): Content => {
  const { resourceType: _r, id: _i, meta: _m, ...content } = resource;
  return content;
};

/** Parses the search parameters of `type` into a query. @throws {DomainError} 400 for unknown or malformed ones. */
const parseSearch = (
  type: ResourceType,
  query: Record<string, string | string[] | undefined>,
): { query: ResourceQuery; includes: string[] } => {
  const supported = SEARCH_PARAMETERS[type];
  const criteria: {
    ids?: number[];
    identifiers?: { system: string | undefined; value: string }[];
    patientIds?: number[];
    encounterIds?: number[];
    elements?: { element: string; values: string[] }[];
  } = {};
  let limit = 100;
  const includes: string[] = [];
  for (const [name, raw] of Object.entries(query)) {
    const values = (Array.isArray(raw) ? raw : [raw ?? '']).filter((v) => v !== '');
    if (name === '_format' || name === '_pretty') continue;
    if (name === '_count') {
      const n = Number(values[0]);
      if (!Number.isInteger(n) || n < 0)
        throw new DomainError('invalid', 'InvalidCount', '_count must be a non-negative integer', '_count');
      limit = Math.min(n, 1000);
      continue;
    }
    if (name === '_include') {
      for (const v of values) {
        if (!supported._include?.includes(v))
          throw new DomainError(
            'invalid',
            'UnsupportedInclude',
            `_include=${v} is not supported on ${type} (supported: ${(supported._include ?? []).join(', ') || 'none'})`,
            '_include',
          );
        includes.push(v);
      }
      continue;
    }
    const parameter: SearchParameter | undefined = supported.parameters[name];
    if (!parameter)
      throw new DomainError(
        'invalid',
        'UnsupportedSearchParameter',
        `search parameter ${name} is not supported on ${type} (supported: ${Object.keys(supported.parameters).join(', ')}, _count${supported._include ? ', _include' : ''})`,
        name,
        { issueCode: 'not-supported' },
      );
    if (values.length > 1)
      throw new DomainError(
        'invalid',
        'RepeatedSearchParameter',
        `give ${name} once (use commas for alternatives)`,
        name,
      );
    const alternatives = (values[0] ?? '').split(',').filter(Boolean);
    if (alternatives.length === 0)
      throw new DomainError('invalid', 'EmptySearchParameter', `${name} needs a value`, name);
    const refIds = (target: string) =>
      alternatives.map((v) => {
        const m = new RegExp(`^(?:${target}/)?(\\d{1,10})$`).exec(v);
        if (!m)
          throw new DomainError(
            'invalid',
            'InvalidReference',
            `${name}=${v} must be ${target}/<id> or <id>`,
            name,
          );
        return Number(m[1]);
      });
    switch (parameter.kind) {
      case 'id':
        criteria.ids = alternatives.map((v) => (/^\d{1,10}$/.test(v) ? Number(v) : -1));
        break;
      case 'token':
        criteria.identifiers = alternatives.map(tokenOf);
        break;
      case 'patient':
        criteria.patientIds = refIds('Patient');
        break;
      case 'encounter':
        criteria.encounterIds = refIds('Encounter');
        break;
      case 'element':
        criteria.elements = [
          ...(criteria.elements ?? []),
          { element: parameter.element, values: alternatives },
        ];
        break;
    }
  }
  return { query: { ...criteria, limit }, includes };
};

/** Builds the router of the data server (mounted at the path of {fhir_base_url}). */
export const fhirRouter = (casebook: Casebook): Router => {
  const router = new Router();
  const base = casebook.config.fhirUrl;
  const handlers = fhirHandlers();
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
    ctx.type = FHIR_JSON;
    ctx.body = await transaction(casebook, handlers, contextFor(ctx, principal), principal, ctx.request.body);
  });

  const search = async (ctx: Context, parameters: Record<string, string | string[] | undefined>) => {
    const def = definitionOf(ctx.params.type!);
    const principal = await resolvePrincipal(ctx, casebook);
    if (!mayAtAll(principal, 's', def.type)) authorize(principal, 's', { resourceType: def.type });
    const { query, includes } = parseSearch(def.type, parameters);
    const matched = (
      await searchResources(casebook.sql, def.type, principal.tenantId, { ...query, limit: 1000 })
    ).filter((row) => isAllowed(principal, 's', targetOf(row)));
    const rows = matched.slice(0, query.limit);
    const included: ResourceRow[] = [];
    for (const include of includes) {
      const [, element] = include.split(':') as [string, string];
      const target: ResourceType = element === 'encounter' ? 'Encounter' : 'Patient';
      const ids = [
        ...new Set(
          rows
            .map((r) => (target === 'Patient' ? r.patientId : r.encounterId))
            .filter((id): id is number => id !== null),
        ),
      ];
      if (ids.length === 0) continue;
      for (const row of await searchResources(casebook.sql, target, principal.tenantId, { ids, limit: 1000 }))
        if (
          isAllowed(principal, 'r', targetOf(row)) &&
          !included.some((i) => i.resourceType === row.resourceType && i.id === row.id)
        )
          included.push(row);
    }
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'searchset',
      total: matched.length,
      link: [{ relation: 'self', url: selfUrl(def.type, parameters) }],
      entry: [
        ...rows.map((row) => ({
          fullUrl: `${base}/${row.resourceType}/${row.id}`,
          resource: row.resource,
          search: { mode: 'match' },
        })),
        ...included.map((row) => ({
          fullUrl: `${base}/${row.resourceType}/${row.id}`,
          resource: row.resource,
          search: { mode: 'include' },
        })),
      ],
    };
  };

  const selfUrl = (type: string, parameters: Record<string, string | string[] | undefined>) => {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(parameters))
      for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value])
        query.append(name, v);
    const text = query.toString();
    return `${base}/${type}${text ? `?${text}` : ''}`;
  };

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
  router.get('/:type/_history', (ctx) => {
    definitionOf(ctx.params.type!);
    throw new DomainError(
      'not_found',
      'UnsupportedInteraction',
      'type-level history is not supported: use GET /{type}/{id}/_history',
      undefined,
      {
        issueCode: 'not-supported',
      },
    );
  });

  router.post('/:type', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const ifNoneExist = ctx.get('If-None-Exist');
    if (ifNoneExist) {
      // FHIR conditional create: an identifier match answers 200 with the existing resource.
      const params = new URLSearchParams(ifNoneExist);
      const identifier = params.get('identifier');
      if (!identifier || [...params.keys()].some((k) => k !== 'identifier'))
        throw new DomainError(
          'invalid',
          'UnsupportedIfNoneExist',
          'If-None-Exist supports identifier=system|value only',
          'If-None-Exist',
        );
      const matches = await searchResources(casebook.sql, def.type, principal.tenantId, {
        identifiers: [tokenOf(identifier)],
        limit: 2,
      });
      if (matches.length > 1)
        throw new DomainError(
          'precondition_failed',
          'MultipleMatches',
          `If-None-Exist matches more than one ${def.type}`,
          'If-None-Exist',
          {
            issueCode: 'multiple-matches',
          },
        );
      if (matches[0]) {
        authorize(principal, 'r', targetOf(matches[0]));
        const row = matches[0];
        sendResource(ctx, 200, row.resource, row.versionId, row.lastUpdated.toISOString());
        return;
      }
    }
    const result = await handlers.create(contextFor(ctx, principal), principal, def, ctx.request.body);
    ctx.set('Location', `${base}/${def.type}/${result.id}/_history/${result.versionId}`);
    sendResource(ctx, 201, written(def.type, result), result.versionId, result.lastUpdated);
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
      throw new DomainError(
        'invalid',
        'UnsupportedCondition',
        `conditional update supports identifier only, not ${others.join(', ')}`,
      );
    const result = await handlers.conditionalUpdate(
      contextFor(ctx, principal),
      principal,
      def,
      identifier,
      ctx.request.body,
    );
    // spec §4.3 rule 2: 200 whether it updated or created.
    ctx.set('Location', `${base}/${def.type}/${result.id}/_history/${result.versionId}`);
    sendResource(ctx, 200, written(def.type, result), result.versionId, result.lastUpdated);
  });

  router.get('/:type/:id', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    const row = await readResource(casebook.sql, def.type, id, principal.tenantId);
    if (!row)
      throw new DomainError('not_found', 'ResourceNotFound', `${def.type}/${id} is not known`, undefined, {
        issueCode: 'not-found',
      });
    authorize(principal, 'r', targetOf(row));
    if (row.deleted)
      throw new DomainError('gone', 'ResourceDeleted', `${def.type}/${id} was deleted`, undefined, {
        issueCode: 'deleted',
      });
    sendResource(ctx, 200, row.resource, row.versionId, row.lastUpdated.toISOString());
  });

  router.put('/:type/:id', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    requireFhirJson(ctx);
    const principal = await resolvePrincipal(ctx, casebook);
    const ifMatch = ifMatchOf(ctx.get('If-Match') || undefined);
    const result = await handlers.update(
      contextFor(ctx, principal),
      principal,
      def,
      id,
      ctx.request.body,
      ifMatch,
    );
    sendResource(ctx, 200, written(def.type, result), result.versionId, result.lastUpdated);
  });

  router.delete('/:type/:id', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const principal = await resolvePrincipal(ctx, casebook);
    const ifMatch = ifMatchOf(ctx.get('If-Match') || undefined);
    await handlers.remove(contextFor(ctx, principal), principal, def, id, ifMatch);
    ctx.status = 204;
  });

  interface Version {
    readonly versionId: number;
    readonly at: string;
    readonly method: 'POST' | 'PUT' | 'DELETE';
    readonly resource: Record<string, unknown> | undefined;
  }
  /** Every version of a resource from its stream, oldest first (issue 3: history includes the delete). */
  const versions = async (ctx: Context, def: ResourceDefinition, id: number): Promise<Version[]> => {
    const principal = await resolvePrincipal(ctx, casebook);
    const row = await readResource(casebook.sql, def.type, id, principal.tenantId);
    if (!row)
      throw new DomainError('not_found', 'ResourceNotFound', `${def.type}/${id} is not known`, undefined, {
        issueCode: 'not-found',
      });
    authorize(principal, 'r', targetOf(row));
    const events = await casebook.store.readStream(resourceStream(def.type, id));
    return events.flatMap((event): Version[] => {
      const kind = resourceEventKind(event.type);
      if (!kind || kind.resourceType !== def.type) return [];
      const versionId = Number(event.revision) + 1;
      if (kind.kind === 'deleted')
        return [{ versionId, at: (event.data as { at: string }).at, method: 'DELETE', resource: undefined }];
      const d = event.data as CreatedData | ChangedData;
      return [
        {
          versionId,
          at: d.at,
          method: kind.kind === 'created' ? 'POST' : 'PUT',
          resource: toFhirResource(def.type, id, versionId, d.at, d.resource),
        },
      ];
    });
  };

  router.get('/:type/:id/_history', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const all = (await versions(ctx, def, id)).reverse();
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Bundle',
      type: 'history',
      total: all.length,
      link: [{ relation: 'self', url: `${base}/${def.type}/${id}/_history` }],
      entry: all.map((v) => ({
        fullUrl: `${base}/${def.type}/${id}`,
        ...(v.resource ? { resource: v.resource } : {}),
        request: { method: v.method, url: v.method === 'POST' ? def.type : `${def.type}/${id}` },
        response: {
          status: v.method === 'POST' ? '201 Created' : v.method === 'PUT' ? '200 OK' : '204 No Content',
          etag: `W/"${v.versionId}"`,
          lastModified: v.at,
        },
      })),
    };
  });

  router.get('/:type/:id/_history/:vid', async (ctx) => {
    const def = definitionOf(ctx.params.type!);
    const id = idOf(def.type, ctx.params.id);
    const vid = ctx.params.vid ?? '';
    const version = /^\d{1,10}$/.test(vid)
      ? (await versions(ctx, def, id)).find((v) => v.versionId === Number(vid))
      : undefined;
    if (!version)
      throw new DomainError(
        'not_found',
        'VersionNotFound',
        `${def.type}/${id} has no version ${vid}`,
        undefined,
        { issueCode: 'not-found' },
      );
    if (!version.resource)
      throw new DomainError(
        'gone',
        'ResourceDeleted',
        `version ${vid} of ${def.type}/${id} is its deletion`,
        undefined,
        { issueCode: 'deleted' },
      );
    sendResource(ctx, 200, version.resource, version.versionId, version.at);
  });

  return router;
};
