/**
 * The transaction Bundle, `POST {fhir_base_url}` with `type: transaction` (issue 3): conditional
 * updates (`PUT Patient?identifier=…`), updates by id, creates (with `ifNoneExist`), deletes;
 * `urn:uuid:` references resolved between entries; a `transaction-response` Bundle.
 *
 * All or nothing on every store: the entries are decisions of one unit of work, appended at once
 * by one `appendMany` (one database transaction on the SQL stores, one multi-stream append on
 * KurrentDB). An entry sees the streams earlier entries wrote (reservations, resources); searches
 * of the read model do not see them until the Bundle is committed.
 */
import { z } from 'zod';
import { DomainError } from '../domain/decider.js';
import type { Content, ResourceType } from '../domain/fhir/resource.js';
import type { Principal } from '../fhir/access.js';
import { droppedElements, writeOutcome } from '../fhir/dropped.js';
import { toFhirResource } from '../fhir/references.js';
import {
  conditionalUpdateStatus,
  definitionOf,
  idOf,
  ifMatchOf,
  ResourceValidationError,
  type Token,
  tokenOf,
} from '../fhir/resources.js';
import { conditionalCreate, conditionalUpdate, create, ifNoneExistToken, remove, update } from './fhir.js';
import type { UnitOfWork } from './handler.js';
import { prefetchMatches, type WriteResult } from './resources.js';

/** Upper bound on entries per transaction (docs/interface.md §8). */
export const MAX_ENTRIES = 200;
/**
 * Upper bound on the identifiers of all entries' resources together (docs/interface.md §8). Each is
 * a reservation stream of the one append: 200 entries of 100 identifiers would be 20,000 streams,
 * seconds of the database's time for one request.
 */
export const MAX_BUNDLE_IDENTIFIERS = 1000;

const bundleSchema = z.object({
  resourceType: z.literal('Bundle', { error: 'resourceType must be Bundle' }),
  type: z.literal('transaction', { error: 'only Bundle.type transaction is supported' }),
  entry: z
    .array(
      z.object({
        fullUrl: z.string().optional(),
        resource: z.record(z.string(), z.unknown()).optional(),
        request: z.object({
          method: z.enum(['POST', 'PUT', 'DELETE'], { error: 'request.method must be POST, PUT or DELETE' }),
          url: z.string().min(1),
          ifNoneExist: z.string().optional(),
          ifMatch: z.string().optional(),
        }),
      }),
    )
    .max(MAX_ENTRIES)
    .default([]),
});

type Entry = z.infer<typeof bundleSchema>['entry'][number];

/** FHIR transaction processing order: DELETE, then POST, then PUT (then dependencies first). */
const ORDER: Record<Entry['request']['method'], number> = { DELETE: 0, POST: 1, PUT: 2 };

/** `urn:uuid:` references anywhere inside a resource. */
const urnReferences = (value: unknown, found = new Set<string>()): Set<string> => {
  if (Array.isArray(value)) for (const v of value) urnReferences(v, found);
  else if (value && typeof value === 'object')
    for (const [key, v] of Object.entries(value)) {
      if (key === 'reference' && typeof v === 'string' && v.startsWith('urn:uuid:')) found.add(v);
      else urnReferences(v, found);
    }
  return found;
};

/** Replaces resolved `urn:uuid:` references by `Type/id`. */
const resolveReferences = (value: unknown, resolved: ReadonlyMap<string, string>): unknown => {
  if (Array.isArray(value)) return value.map((v) => resolveReferences(v, resolved));
  if (value && typeof value === 'object')
    return Object.fromEntries(
      Object.entries(value).map(([key, v]) => [
        key,
        key === 'reference' && typeof v === 'string' && resolved.has(v)
          ? resolved.get(v)
          : resolveReferences(v, resolved),
      ]),
    );
  return value;
};

/** Prefixes a failure with the entry it concerns, keeping its status. */
const atEntry = (index: number, error: unknown): unknown => {
  if (error instanceof DomainError)
    return new DomainError(
      error.kind,
      error.code,
      `Bundle.entry[${index}]: ${error.message}`,
      // `Patient.identifier` inside entry 2 is `Bundle.entry[2].resource.identifier`.
      `Bundle.entry[${index}]${error.expression ? `.resource.${error.expression.replace(/^[A-Z][A-Za-z]*\./, '')}` : ''}`,
      error.fhir,
    );
  // 422 validation issues get the entry in their FHIRPath (Bundle.entry[i].resource.status).
  if (error instanceof ResourceValidationError)
    return new ResourceValidationError(`Bundle.entry[${index}].resource`, error.zodError, error.body);
  return error;
};

interface EntryResult {
  readonly status: string;
  readonly location?: string;
  readonly etag?: string;
  readonly lastModified?: string;
  readonly resource?: Record<string, unknown>;
  /** What the entry's resource sent that was not stored (issue 35; docs/interface.md §4.3 rule 13). */
  readonly outcome?: Record<string, unknown>;
}

/**
 * What an entry's `request.url` names: the resource type's definition, the id after it (raw), and
 * the query.
 * @throws {DomainError} 400 for an unknown type or a longer path.
 */
const requestTarget = (entry: Entry) => {
  const [path, query] = entry.request.url.replace(/^\/+/, '').split('?', 2) as [string, string | undefined];
  const [type, rawId, ...rest] = path.split('/');
  const def = definitionOf(type ?? '');
  if (rest.length)
    throw new DomainError(
      'invalid',
      'UnsupportedUrl',
      `request.url ${entry.request.url} is not supported`,
      'request.url',
    );
  return { def, rawId, query };
};

/** The type and identifier a conditional entry (PUT `Type?identifier=`, POST `ifNoneExist`) matches on; undefined for any other or a malformed one. */
const conditionalMatchOf = (entry: Entry): { type: ResourceType; token: Token } | undefined => {
  try {
    const { def, rawId, query } = requestTarget(entry);
    if (rawId !== undefined) return undefined;
    if (entry.request.method === 'PUT') {
      const identifier = new URLSearchParams(query ?? '').get('identifier');
      return identifier ? { type: def.type, token: tokenOf(identifier) } : undefined;
    }
    if (entry.request.method === 'POST' && entry.request.ifNoneExist)
      return { type: def.type, token: ifNoneExistToken(entry.request.ifNoneExist, 'request.ifNoneExist') };
  } catch {
    // The entry's own run reports what is wrong with it.
  }
  return undefined;
};

/**
 * Runs a transaction Bundle for `principal` as decisions of `uow`.
 * @returns the transaction-response Bundle.
 * @throws {DomainError} 400 malformed bundle or unresolvable reference; the first failing entry's
 *   error otherwise (403 uncovered by scopes, 409, 412, 422…), named after the entry; nothing is
 *   written then.
 */
export const transaction = async (
  uow: UnitOfWork,
  principal: Principal,
  body: unknown,
): Promise<Record<string, unknown>> => {
  const parsed = bundleSchema.safeParse(body);
  if (!parsed.success)
    throw new DomainError(
      'invalid',
      'InvalidBundle',
      parsed.error.issues.map((i) => `Bundle.${i.path.join('.')}: ${i.message}`).join('; '),
      'Bundle',
    );
  const entries = parsed.data.entry;
  const identifierCount = entries.reduce(
    (n, e) => n + (Array.isArray(e.resource?.identifier) ? e.resource.identifier.length : 0),
    0,
  );
  if (identifierCount > MAX_BUNDLE_IDENTIFIERS)
    throw new DomainError(
      'invalid',
      'BundleTooLarge',
      `the entries' resources hold ${identifierCount} identifiers in all; a transaction takes at most ${MAX_BUNDLE_IDENTIFIERS} (docs/interface.md §8)`,
      'Bundle.entry',
    );

  // Order: FHIR's method order, but an entry runs only after the entries it references by urn:uuid.
  const fullUrls = new Map(
    entries.flatMap((e, i) => (e.fullUrl?.startsWith('urn:uuid:') ? [[e.fullUrl, i] as const] : [])),
  );
  const dependencies = entries.map((e, i) => {
    const refs = [...urnReferences(e.resource)];
    for (const ref of refs)
      if (!fullUrls.has(ref))
        throw new DomainError(
          'invalid',
          'UnresolvedReference',
          `Bundle.entry[${i}]: ${ref} is not the fullUrl of an entry`,
          `Bundle.entry[${i}]`,
        );
    return refs.map((ref) => fullUrls.get(ref)!);
  });
  const pending = entries
    .map((_, i) => i)
    .sort((a, b) => ORDER[entries[a]!.request.method] - ORDER[entries[b]!.request.method] || a - b);
  const order: number[] = [];
  while (pending.length) {
    const next = pending.findIndex((i) => dependencies[i]!.every((d) => order.includes(d)));
    if (next < 0)
      throw new DomainError(
        'invalid',
        'ReferenceCycle',
        'the entries reference each other in a cycle',
        'Bundle.entry',
      );
    order.push(...pending.splice(next, 1));
  }

  const runEntry = async (entry: Entry, resolved: Map<string, string>): Promise<EntryResult> => {
    const { def, rawId, query } = requestTarget(entry);
    const resource = entry.resource ? (resolveReferences(entry.resource, resolved) as Content) : undefined;
    // Same rules as the If-Match header: W/"3" or "3", anything else is 400 (not a 412 for NaN).
    const ifMatch = ifMatchOf(entry.request.ifMatch || undefined);
    const done = (status: string, result: WriteResult): EntryResult => {
      const dropped = droppedElements(def.type, resource, result.content).length > 0;
      return {
        status,
        location: `${def.type}/${result.id}/_history/${result.versionId}`,
        etag: `W/"${result.versionId}"`,
        lastModified: result.lastUpdated,
        resource: toFhirResource(def.type, result.id, result.versionId, result.lastUpdated, result.content),
        ...(dropped ? { outcome: writeOutcome(def.type, resource, result.content) } : {}),
      };
    };
    switch (entry.request.method) {
      case 'POST': {
        if (rawId !== undefined)
          throw new DomainError('invalid', 'UnsupportedUrl', 'POST goes to the resource type', 'request.url');
        if (entry.request.ifNoneExist) {
          const token = ifNoneExistToken(entry.request.ifNoneExist, 'request.ifNoneExist');
          const result = await conditionalCreate(uow, principal, def, token, resource, 'request.ifNoneExist');
          if (!result.created)
            return {
              status: '200 OK',
              location: `${def.type}/${result.id}/_history/${result.versionId}`,
              etag: `W/"${result.versionId}"`,
              lastModified: result.lastUpdated,
            };
          return done('201 Created', result);
        }
        return done('201 Created', await create(uow, principal, def, resource));
      }
      case 'PUT': {
        if (rawId === undefined) {
          const params = new URLSearchParams(query ?? '');
          const identifier = params.get('identifier') ?? undefined;
          const result = await conditionalUpdate(uow, principal, def, identifier, resource);
          return done(
            conditionalUpdateStatus(def.type, result.created) === 201 ? '201 Created' : '200 OK',
            result,
          );
        }
        const id = idOf(def.type, rawId);
        return done('200 OK', await update(uow, principal, def, id, resource, ifMatch));
      }
      case 'DELETE': {
        const id = idOf(def.type, rawId);
        await remove(uow, principal, def, id, ifMatch);
        return { status: '204 No Content' };
      }
    }
  };

  // What the conditional entries look up (their identifiers' reservations and the resources those
  // name), in two reads instead of two per entry. An entry that cannot be read here is left to its
  // own run, which reports it with its index.
  await prefetchMatches(
    uow,
    principal.tenantId,
    entries.flatMap((entry) => conditionalMatchOf(entry) ?? []),
  );
  const resolved = new Map<string, string>();
  const results: EntryResult[] = new Array(entries.length);
  for (const index of order) {
    const entry = entries[index]!;
    try {
      results[index] = await runEntry(entry, resolved);
    } catch (error) {
      throw atEntry(index, error);
    }
    const location = results[index]!.location;
    if (entry.fullUrl && location) resolved.set(entry.fullUrl, location.split('/_history')[0]!);
  }
  return {
    resourceType: 'Bundle',
    type: 'transaction-response',
    // No empty arrays in FHIR JSON: an empty transaction's response has no `entry`.
    ...(results.length > 0
      ? {
          entry: results.map((r) => ({
            ...(r.resource ? { resource: r.resource } : {}),
            response: {
              status: r.status,
              ...(r.location ? { location: r.location } : {}),
              ...(r.etag ? { etag: r.etag } : {}),
              ...(r.lastModified ? { lastModified: r.lastModified } : {}),
              ...(r.outcome ? { outcome: r.outcome } : {}),
            },
          })),
        }
      : {}),
  };
};
