/**
 * The transaction Bundle, `POST {fhir_base_url}` with `type: transaction` (issue 3): conditional
 * updates (`PUT Patient?identifier=…`), updates by id, creates (with `ifNoneExist`), deletes;
 * `urn:uuid:` references resolved between entries; a `transaction-response` Bundle.
 *
 * All-or-nothing on the SQL event stores: every entry's events are appended inside one database
 * transaction, committed only when every entry succeeded. KurrentDB has no transaction spanning
 * several commands: there each entry is atomic on its own and entries are applied in order, so a
 * failing entry leaves the earlier ones written (the error names the failing entry).
 */
import { z } from 'zod';
import type { Casebook } from '../../casebook.js';
import type { CommandContext } from '../../commands/context.js';
import { findByIdentifier, type WriteResult } from '../../commands/resources.js';
import { DomainError } from '../../domain/decider.js';
import type { Content, ResourceType } from '../../domain/fhir/resource.js';
import { SqlEventStore } from '../../eventstore/sql-event-store.js';
import { authorize, type Principal } from '../../fhir/access.js';
import { toFhirResource } from '../../fhir/references.js';
import { searchResources } from '../../projections/resources.js';
import { ResourceValidationError } from './outcome.js';
import { definitionOf, type FhirHandlers, idOf, ifMatchOf, targetOf, tokenOf } from './router.js';

/** Upper bound on entries per transaction. */
export const MAX_ENTRIES = 200;

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
}

/**
 * Runs a transaction Bundle for `principal`.
 * @returns the transaction-response Bundle.
 * @throws {DomainError} 400 malformed bundle or unresolvable reference; the first failing entry's
 *   error otherwise (403 uncovered by scopes, 409, 412, 422…), with nothing written on SQL stores.
 */
export const transaction = async (
  casebook: Casebook,
  handlers: FhirHandlers,
  ctx: CommandContext,
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

  const run = async (c: CommandContext): Promise<EntryResult[]> => {
    const resolved = new Map<string, string>();
    const results: EntryResult[] = new Array(entries.length);
    for (const index of order) {
      const entry = entries[index]!;
      try {
        results[index] = await runEntry(c, entry, resolved);
      } catch (error) {
        throw atEntry(index, error);
      }
      const location = results[index]!.location;
      if (entry.fullUrl && location) resolved.set(entry.fullUrl, location.split('/_history')[0]!);
    }
    return results;
  };

  const runEntry = async (
    c: CommandContext,
    entry: Entry,
    resolved: Map<string, string>,
  ): Promise<EntryResult> => {
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
    const resource = entry.resource ? (resolveReferences(entry.resource, resolved) as Content) : undefined;
    // Same rules as the If-Match header: W/"3" or "3", anything else is 400 (not a 412 for NaN).
    const ifMatch = ifMatchOf(entry.request.ifMatch || undefined);
    const done = (status: string, result: WriteResult): EntryResult => ({
      status,
      location: `${def.type}/${result.id}/_history/${result.versionId}`,
      etag: `W/"${result.versionId}"`,
      lastModified: result.lastUpdated,
      resource: toFhirResource(
        def.type as ResourceType,
        result.id,
        result.versionId,
        result.lastUpdated,
        result.content,
      ),
    });
    switch (entry.request.method) {
      case 'POST': {
        if (rawId !== undefined)
          throw new DomainError('invalid', 'UnsupportedUrl', 'POST goes to the resource type', 'request.url');
        if (entry.request.ifNoneExist) {
          const params = new URLSearchParams(entry.request.ifNoneExist);
          const identifier = params.get('identifier');
          if (!identifier)
            throw new DomainError(
              'invalid',
              'UnsupportedIfNoneExist',
              'ifNoneExist supports identifier=system|value only',
              'request.ifNoneExist',
            );
          const token = tokenOf(identifier);
          // With a system, the reservation stream answers (and sees this transaction's own writes).
          const reserved =
            def.uniqueIdentifiers && token.system
              ? await findByIdentifier(c, def.type, principal.tenantId, token.system, token.value)
              : undefined;
          const matches =
            reserved !== undefined
              ? await searchResources(c.sql, def.type, principal.tenantId, { ids: [reserved], limit: 1 })
              : await searchResources(c.sql, def.type, principal.tenantId, {
                  identifiers: [token],
                  limit: 2,
                });
          if (matches.length > 1)
            throw new DomainError(
              'precondition_failed',
              'MultipleMatches',
              `ifNoneExist matches more than one ${def.type}`,
              'request.ifNoneExist',
              {
                issueCode: 'multiple-matches',
              },
            );
          const match = matches[0];
          // Answering with the match reveals it: the caller must be allowed to read it, as on
          // POST with If-None-Exist (a request not covered is refused, spec §5.3 rule 1).
          if (match) {
            authorize(principal, 'r', targetOf(match));
            return {
              status: '200 OK',
              location: `${def.type}/${match.id}/_history/${match.versionId}`,
              etag: `W/"${match.versionId}"`,
              lastModified: match.lastUpdated.toISOString(),
            };
          }
        }
        return done('201 Created', await handlers.create(c, principal, def, resource));
      }
      case 'PUT': {
        if (rawId === undefined) {
          const params = new URLSearchParams(query ?? '');
          const identifier = params.get('identifier') ?? undefined;
          return done('200 OK', await handlers.conditionalUpdate(c, principal, def, identifier, resource));
        }
        const id = idOf(def.type, rawId);
        return done('200 OK', await handlers.update(c, principal, def, id, resource, ifMatch));
      }
      case 'DELETE': {
        const id = idOf(def.type, rawId);
        await handlers.remove(c, principal, def, id, ifMatch);
        return { status: '204 No Content' };
      }
    }
  };

  let results: EntryResult[];
  if (casebook.store.kind === 'kurrentdb') {
    results = await run(ctx);
  } else {
    // One database transaction for every entry: its appends join it, its reads see them.
    results = await casebook.sql.transaction(async (tx) => {
      const store = await SqlEventStore.open(tx);
      return run({ ...ctx, sql: tx, store, waitForProjections: async () => true });
    });
    const head = await casebook.store.headPosition();
    if (head) await ctx.waitForProjections(head);
  }
  return {
    resourceType: 'Bundle',
    type: 'transaction-response',
    entry: results.map((r) => ({
      ...(r.resource ? { resource: r.resource } : {}),
      response: {
        status: r.status,
        ...(r.location ? { location: r.location } : {}),
        ...(r.etag ? { etag: r.etag } : {}),
        ...(r.lastModified ? { lastModified: r.lastModified } : {}),
      },
    })),
  };
};
