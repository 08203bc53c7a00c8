/**
 * The FHIR read interactions of the application layer (docs/interface.md §4.3, §5.3; issue 3):
 * read, history and vread (folded from the resource's stream), search (from the read model) and
 * `$everything`, each showing only what the caller may see (src/queries/visibility.ts: every
 * version, match, total and included resource is judged by the one rule). The routers map their
 * results to HTTP.
 */
import type { Sql } from '../db/sql.js';
import { DomainError } from '../domain/decider.js';
import { patientErased } from '../domain/erasure/erasure.js';
import {
  type ChangedData,
  type CreatedData,
  isResourceType,
  type ResourceType,
  resourceEventKind,
  resourceStream,
} from '../domain/fhir/resource.js';
import type { EventStore } from '../eventstore/port.js';
import {
  type AccessTarget,
  authorize,
  coversEveryResource,
  mayAtAll,
  type Principal,
  targetOf,
} from '../fhir/access.js';
import { isFhirInstant } from '../fhir/dates.js';
import { DEFINITIONS, type ResourceDefinition } from '../fhir/definitions.js';
import { MAX_RESOURCE_ID, resourceIdIn, toFhirResource } from '../fhir/references.js';
import { tokenOf } from '../fhir/resources.js';
import { countOf, SEARCH_PARAMETERS, type SearchParameter, searchDateRange } from '../fhir/search.js';
import { referenceEntry, referencesOf, tokenEntry } from '../fhir/search-index.js';
import { isFhirString } from '../fhir/strings.js';
import {
  countResources,
  type DateCriterion,
  everythingLinksOf,
  type KeyedRow,
  type ResourceQuery,
  type ResourceRow,
  readResource,
  rowOf,
  type SearchKey,
  type SearchSort,
  searchResources,
} from '../projections/resources.js';
import { readVisible, versionTarget, visibleRows, visibleTo } from './visibility.js';

const notFound = (type: ResourceType, id: number) =>
  new DomainError('not_found', 'ResourceNotFound', `${type}/${id} is not known`, undefined, {
    issueCode: 'not-found',
  });

/**
 * A resource of the caller's tenant that the caller may read as it stands now (deleted ones too).
 * @throws {DomainError} 404 unknown (or another tenant's), 403 scopes.
 */
const existingVisible = async (
  sql: Sql,
  principal: Principal,
  type: ResourceType,
  id: number,
): Promise<ResourceRow> => {
  const row = await readVisible(sql, principal, type, id);
  if (!row) throw notFound(type, id);
  return row;
};

/**
 * The current version of a resource (FHIR read).
 * @throws {DomainError} 404 unknown (or another tenant's), 403 scopes, 410 deleted.
 */
export const read = async (
  sql: Sql,
  principal: Principal,
  def: ResourceDefinition,
  id: number,
): Promise<ResourceRow> => {
  const row = await existingVisible(sql, principal, def.type, id);
  if (row.deleted)
    throw new DomainError('gone', 'ResourceDeleted', `${def.type}/${id} was deleted`, undefined, {
      issueCode: 'deleted',
    });
  return row;
};

/** One version of a resource, from its stream. */
export interface Version {
  readonly versionId: number;
  readonly at: string;
  readonly method: 'POST' | 'PUT' | 'DELETE';
  /** FHIR JSON of the version; undefined for the deletion. */
  readonly resource: Record<string, unknown> | undefined;
}

/** A version with the facts a scope decision on it needs (a deletion: those of the version it ended). */
interface StoredVersion extends Version {
  readonly target: AccessTarget;
}

/** Every version of a resource, oldest first, folded from its stream (issue 3: history includes the delete). */
const storedVersions = async (
  store: EventStore,
  def: ResourceDefinition,
  id: number,
): Promise<StoredVersion[]> => {
  const events = await store.readStream(resourceStream(def.type, id));
  // Erased with its patient: no version is left to show (docs/architecture.md "Erasure").
  if (events.some((e) => e.erased)) throw patientErased(`${def.type}/${id}`);
  let created: CreatedData | undefined;
  let target: AccessTarget = { resourceType: def.type, id };
  return events.flatMap((event): StoredVersion[] => {
    const kind = resourceEventKind(event.type);
    if (!kind || kind.resourceType !== def.type) return [];
    const versionId = Number(event.revision) + 1;
    if (kind.kind === 'deleted')
      return [
        { versionId, at: (event.data as { at: string }).at, method: 'DELETE', resource: undefined, target },
      ];
    const d = event.data as CreatedData | ChangedData;
    if (kind.kind === 'created') created = d as CreatedData;
    target = versionTarget(def.type, id, d.resource, created ?? {});
    return [
      {
        versionId,
        at: d.at,
        method: kind.kind === 'created' ? 'POST' : 'PUT',
        resource: toFhirResource(def.type, id, versionId, d.at, d.resource),
        target,
      },
    ];
  });
};

/** The versions among `chosen` the caller may read, each judged as it stood (docs/interface.md §4.3 rule 11). */
const visibleVersions = (principal: Principal, chosen: readonly StoredVersion[]): Version[] =>
  chosen.filter((v) => visibleTo(principal, v.target)).map(({ target: _target, ...version }) => version);

/**
 * FHIR vread: one version of a resource the caller may read now, when the caller may read that
 * version as it stood (a report moved to this patient from another keeps its earlier versions
 * from the caller).
 * @throws {DomainError} 404 unknown resource or version, 403 scopes (now or on that version),
 *   410 the version is the deletion.
 */
export const vread = async (
  sql: Sql,
  store: EventStore,
  principal: Principal,
  def: ResourceDefinition,
  id: number,
  versionId: number | undefined,
): Promise<Version & { readonly resource: Record<string, unknown> }> => {
  await existingVisible(sql, principal, def.type, id);
  const version =
    versionId === undefined
      ? undefined
      : (await storedVersions(store, def, id)).find((v) => v.versionId === versionId);
  if (!version)
    throw new DomainError(
      'not_found',
      'VersionNotFound',
      `${def.type}/${id} has no version ${versionId ?? ''}`,
      undefined,
      { issueCode: 'not-found' },
    );
  authorize(principal, 'r', version.target);
  if (!version.resource)
    throw new DomainError(
      'gone',
      'ResourceDeleted',
      `version ${versionId} of ${def.type}/${id} is its deletion`,
      undefined,
      { issueCode: 'deleted' },
    );
  return {
    versionId: version.versionId,
    at: version.at,
    method: version.method,
    resource: version.resource,
  };
};

/** Parameters of a search, as they come (query string or form). */
export type SearchParams = Record<string, string | string[] | undefined>;

/** `_count` of a history page when none is given (docs/interface.md §4.3 rule 11). */
export const DEFAULT_HISTORY_COUNT = 20;

/** A history page's parameters: `_count`, `_cursor`, `_since`, `_at`. */
export interface HistoryParams {
  readonly count: number;
  /** Instant: only versions last updated at or after it. */
  readonly since: Date | undefined;
  /** Instant: per resource, only the version current at it. */
  readonly at: Date | undefined;
  /** Type level: the last resource id of the previous page; instance level: the last versionId. */
  readonly after: number | undefined;
  /** A previous page: the first resource id (type level) or versionId (instance) of the page after it. */
  readonly before: number | undefined;
}

const instantOf = (name: string, text: string): Date => {
  // FHIR instant (a date or a date-time with a zone also accepted, as search dates are): its start.
  const range = searchDateRange(text);
  if (!range)
    throw new DomainError(
      'invalid',
      'InvalidInstant',
      `${name} must be an instant such as 2026-03-01T10:00:00Z`,
      name,
    );
  return range.start;
};

/**
 * Parses `_history` parameters (FHIR R5 http.html#history; docs/interface.md §4.3 rule 11).
 * @throws {DomainError} 400 unknown or malformed parameters, `_since` with `_at`.
 */
export const parseHistory = (query: SearchParams): HistoryParams => {
  let count = DEFAULT_HISTORY_COUNT;
  let since: Date | undefined;
  let at: Date | undefined;
  let after: number | undefined;
  let before: number | undefined;
  for (const [name, raw] of Object.entries(query)) {
    const values = (Array.isArray(raw) ? raw : [raw ?? '']).filter((v) => v !== '');
    if (name === '_format' || name === '_pretty') continue;
    if (values.length !== 1)
      throw new DomainError('invalid', 'InvalidHistoryParameter', `give ${name} once, with a value`, name);
    const value = values[0]!;
    if (name === '_count') {
      const n = countOf(value);
      if (n === undefined)
        throw new DomainError('invalid', 'InvalidCount', '_count must be a non-negative integer', '_count');
      count = Math.min(n, MAX_SEARCH_COUNT);
    } else if (name === '_since') since = instantOf(name, value);
    else if (name === '_at') at = instantOf(name, value);
    else if (name === '_cursor') {
      // `<key>`: the page after key (next); `p<key>`: the page before it (previous).
      const cursor = /^(p?)(\d{1,10})$/.exec(value);
      if (!cursor || resourceIdIn(cursor[2]!) === undefined)
        throw new DomainError(
          'invalid',
          'InvalidCursor',
          '_cursor is not a cursor of this history',
          '_cursor',
        );
      if (cursor[1] === 'p') before = Number(cursor[2]);
      else after = Number(cursor[2]);
    } else
      throw new DomainError(
        'invalid',
        'UnsupportedHistoryParameter',
        `${name} is not supported on _history (supported: _count, _since, _at, _cursor)`,
        name,
        { issueCode: 'not-supported' },
      );
  }
  if (since && at)
    throw new DomainError('invalid', 'InvalidHistoryParameter', 'give _since or _at, not both', '_at');
  return { count, since, at, after, before };
};

/** The version of `all` (oldest first) current at `at`: the last one recorded at or before it. */
const currentAt = <V extends Version>(all: readonly V[], at: Date): V | undefined =>
  all.filter((v) => Date.parse(v.at) <= at.getTime()).at(-1);

/**
 * The versions a history shows of one resource, newest first: with `_at` the one current at that
 * instant, else those recorded at or after `_since` (all without it) — of these, the ones the
 * caller may read as they stood. A version the caller may not read is left out, never replaced
 * by an older one.
 */
const shownVersions = (
  principal: Principal,
  all: readonly StoredVersion[],
  params: HistoryParams,
): Version[] => {
  const chosen = params.at
    ? [currentAt(all, params.at)].filter((v): v is StoredVersion => v !== undefined)
    : all.filter((v) => !params.since || Date.parse(v.at) >= params.since.getTime());
  return visibleVersions(principal, chosen).reverse();
};

/** A page of history entries, newest first, and the `_cursor`s of the next and previous pages. */
export interface HistoryPage {
  readonly versions: readonly (Version & { readonly resourceType: ResourceType; readonly id: number })[];
  readonly total: number | undefined;
  readonly next: string | undefined;
  readonly previous: string | undefined;
}

/**
 * Instance history, one page (FHIR R5 http.html#history): versions newest first; `_since` keeps
 * those recorded at or after it; `_at` keeps the one current at that instant (none when the
 * resource did not exist yet; its deletion when it was deleted then). Only a resource the caller
 * may read now has a history for it, and of it only the versions the caller may read as they
 * stood (docs/interface.md §4.3 rule 11).
 * @throws {DomainError} 404 unknown, 403 scopes, 400 parameters.
 */
export const instanceHistory = async (
  sql: Sql,
  store: EventStore,
  principal: Principal,
  def: ResourceDefinition,
  id: number,
  query: SearchParams,
): Promise<HistoryPage> => {
  const params = parseHistory(query);
  await existingVisible(sql, principal, def.type, id);
  const newestFirst = shownVersions(principal, await storedVersions(store, def, id), params);
  const { after, before } = params;
  let page: Version[];
  if (before !== undefined) {
    // A previous page: the `_count` versions just newer than `before`.
    const newer = newestFirst.filter((v) => v.versionId > before);
    page = newer.slice(Math.max(0, newer.length - params.count));
  } else {
    const rest = after === undefined ? newestFirst : newestFirst.filter((v) => v.versionId < after);
    page = rest.slice(0, params.count);
  }
  const first = page[0];
  const last = page.at(-1);
  return {
    versions: page.map((v) => ({ ...v, resourceType: def.type, id })),
    total: newestFirst.length,
    next: last && newestFirst.some((v) => v.versionId < last.versionId) ? String(last.versionId) : undefined,
    previous:
      first && newestFirst.some((v) => v.versionId > first.versionId) ? `p${first.versionId}` : undefined,
  };
};

/**
 * Type-level history, one page (FHIR R5 http.html#history): the resources of the type the caller
 * may read (deleted ones too), `_count` resources per page in id order, each with its versions
 * newest first — or, with `_at`, the version current at that instant —, of these the versions the
 * caller may read as they stood (a resource with none is on no page). The page is keyed by
 * resource id (`_cursor`), so writes between pages never shift it.
 * @throws {DomainError} 403 no read scope on the type, 400 parameters.
 */
export const typeHistory = async (
  sql: Sql,
  store: EventStore,
  principal: Principal,
  def: ResourceDefinition,
  query: SearchParams,
): Promise<HistoryPage> => {
  if (!mayAtAll(principal, 'r', def.type)) authorize(principal, 'r', { resourceType: def.type });
  const params = parseHistory(query);
  const backwards = params.before !== undefined;
  /** The versions of a resource this history shows (none: it is not on any page). */
  const shown = async (row: ResourceRow): Promise<Version[]> => {
    if (!visibleTo(principal, targetOf(row))) return [];
    if (params.since && row.lastUpdated.getTime() < params.since.getTime()) return [];
    return shownVersions(principal, await storedVersions(store, def, row.id), params);
  };
  // Resources in id order from the cursor (descending for a previous page), `_count` of them, and
  // whether one more lies beyond the page.
  const picked: { id: number; versions: Version[] }[] = [];
  let beyond = false;
  let key = backwards ? params.before! : (params.after ?? 0);
  scan: for (;;) {
    const rows = (
      await sql.query(
        `SELECT * FROM rm_resources WHERE resource_type = $1 AND tenant_id = $2 AND id ${backwards ? '<' : '>'} $3 ORDER BY id ${backwards ? 'DESC' : ''} LIMIT 200`,
        [def.type, principal.tenantId, key],
      )
    ).map(rowOf);
    for (const row of rows) {
      key = row.id;
      const chosen = await shown(row);
      if (chosen.length === 0) continue;
      if (picked.length === params.count) {
        beyond = true;
        break scan;
      }
      picked.push({ id: row.id, versions: chosen });
    }
    if (rows.length < 200) break;
  }
  if (backwards) picked.reverse();
  const out = picked.flatMap((p) => p.versions.map((v) => ({ ...v, resourceType: def.type, id: p.id })));
  const firstId = picked[0]?.id;
  const lastId = picked.at(-1)?.id;
  // Forwards, a page after a cursor has one before it; backwards, the page that linked here follows.
  const hasNext = backwards ? lastId !== undefined : beyond;
  const hasPrevious = backwards ? beyond : params.after !== undefined && firstId !== undefined;
  return {
    versions: out,
    total: undefined,
    next: hasNext && lastId !== undefined ? String(lastId) : undefined,
    previous: hasPrevious && firstId !== undefined ? `p${firstId}` : undefined,
  };
};

/** `_count` of a search when none is given, and the most one page holds (docs/interface.md §4.3 rule 10). */
export const DEFAULT_SEARCH_COUNT = 20;
export const MAX_SEARCH_COUNT = 1000;

/** `_total` (FHIR R5 search.html#total): none, estimate, or accurate (the default). */
export type TotalMode = 'none' | 'estimate' | 'accurate';

/**
 * Where a page starts (`_cursor`, opaque to clients): after (`n`, a next page) or before (`p`, a
 * previous page) the row with this key, in this order. It carries no secret and no server state,
 * so any replica answers it; a tampered cursor is a 400, never another tenant's data (the tenant
 * and the scopes come from the credentials).
 */
interface Cursor {
  readonly direction: 'n' | 'p';
  readonly key: SearchKey;
  /** The `_sort` the cursor was made for: a cursor of another order is refused. */
  readonly sort: string;
}

const encodePageCursor = (cursor: Cursor): string =>
  Buffer.from(JSON.stringify([cursor.direction, cursor.key.value, cursor.key.id, cursor.sort])).toString(
    'base64url',
  );

const decodePageCursor = (text: string): Cursor => {
  const invalid = () =>
    new DomainError('invalid', 'InvalidCursor', '_cursor is not a cursor of this search', '_cursor');
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw invalid();
  }
  if (
    !Array.isArray(value) ||
    value.length !== 4 ||
    (value[0] !== 'n' && value[0] !== 'p') ||
    typeof value[1] !== 'string' ||
    value[1].length > 2048 ||
    !Number.isInteger(value[2]) ||
    value[2] < 0 ||
    value[2] > MAX_RESOURCE_ID ||
    typeof value[3] !== 'string'
  )
    throw invalid();
  return { direction: value[0], key: { value: value[1], id: value[2] }, sort: value[3] };
};

/** The `_lastUpdated` key a cursor carries: the instant in UTC to the microsecond, as SQL writes it. */
const LAST_UPDATED_KEY = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:[0-5]\d\.\d{6}Z$/;

/**
 * Whether a cursor's key is a value of the order `by`, one PostgreSQL casts back without error
 * (issue 33: what the parser accepts, the database accepts): an id of at most 2,147,483,647; an
 * instant of a real calendar day from year 0001 (JavaScript's `Date.parse` reads 30 February and
 * year 0000, PostgreSQL refuses them); any other order's text without what PostgreSQL text
 * cannot hold (U+0000).
 */
const isCursorKeyOf = (by: SearchSort['by'], key: string): boolean => {
  if (by === '_id') return resourceIdIn(key) !== undefined;
  if (by === '_lastUpdated') return LAST_UPDATED_KEY.test(key) && isFhirInstant(key);
  return isFhirString(key);
};

/** Orders a search can be sorted by, beside `_id` and `_lastUpdated`. */
const isSortable = (p: SearchParameter): boolean =>
  p.kind === 'element' || (p.kind === 'indexed' && p.definition.type === 'date');

const DATE_PREFIX = /^(eq|ne|gt|lt|ge|le|sa|eb|ap)?(.*)$/;

/**
 * A date search value's alternatives (FHIR R5 search.html#date: a prefix, then a date, a month, a
 * year or an instant; commas for alternatives) as index comparisons.
 * @throws {DomainError} 400 for a value that is not a date.
 */
const dateCriteria = (name: string, code: string, value: string): DateCriterion[] =>
  value
    .split(',')
    .filter(Boolean)
    .map((v) => {
      const [, prefix, text] = DATE_PREFIX.exec(v)!;
      const range = searchDateRange(text!);
      if (!range)
        throw new DomainError(
          'invalid',
          'InvalidDate',
          `${name}=${v} must be a date such as 2026, 2026-03, 2026-03-01 or 2026-03-01T10:00:00Z, after an optional prefix (eq, ne, gt, lt, ge, le, sa, eb, ap)`,
          name,
        );
      return {
        code,
        prefix: (prefix ?? 'eq') as DateCriterion['prefix'],
        start: range.start.toISOString(),
        end: range.end.toISOString(),
      };
    });

/**
 * A reference search value as the index holds it (`Type/id`): `Type/id`, or a bare id when the
 * parameter targets one type. Ids are compared as written.
 * @throws {DomainError} 400 for another form.
 */
const referenceValue = (name: string, value: string, targets: readonly string[]): string => {
  if (/^[A-Z][A-Za-z]{1,63}\/[A-Za-z0-9\-.]{1,64}$/.test(value)) return value;
  if (/^[A-Za-z0-9\-.]{1,64}$/.test(value) && targets.length === 1) return `${targets[0]}/${value}`;
  throw new DomainError(
    'invalid',
    'InvalidReference',
    `${name}=${value} must be Type/<id>${targets.length === 1 ? ' or <id>' : ''}`,
    name,
  );
};

/** A parsed search: the query, the paging and the `_include`s. */
export interface ParsedSearch {
  readonly query: Omit<ResourceQuery, 'limit'>;
  readonly includes: string[];
  readonly count: number;
  readonly total: TotalMode;
  /** `_sort` as given (normalised), '' for the default order. */
  readonly sortText: string;
  readonly sort: SearchSort | undefined;
  readonly cursor: Cursor | undefined;
}

/**
 * Parses the search parameters of `type` into a query and its paging (docs/interface.md §4.3 rule 10).
 * @throws {DomainError} 400 for unknown or malformed parameters, a `_sort` on an unsupported
 *   parameter, a cursor that is not one of this search.
 */
export const parseSearch = (type: ResourceType, query: SearchParams): ParsedSearch => {
  const supported = SEARCH_PARAMETERS[type];
  const criteria: {
    ids?: number[];
    identifiers?: { system: string | undefined; value: string }[];
    patientIds?: number[];
    encounterIds?: number[];
    elements?: { element: string; values: string[] }[];
    tokens?: string[][];
    dates?: DateCriterion[][];
  } = {};
  let count = DEFAULT_SEARCH_COUNT;
  let total: TotalMode = 'accurate';
  let sortText = '';
  let sort: SearchSort | undefined;
  let cursor: Cursor | undefined;
  const includes: string[] = [];
  const single = (name: string, values: string[]): string => {
    if (values.length > 1)
      throw new DomainError('invalid', 'RepeatedSearchParameter', `give ${name} once`, name);
    return values[0] ?? '';
  };
  for (const [name, raw] of Object.entries(query)) {
    const values = (Array.isArray(raw) ? raw : [raw ?? '']).filter((v) => v !== '');
    if (name === '_format' || name === '_pretty') continue;
    if (name === '_count') {
      const n = countOf(single(name, values));
      if (n === undefined)
        throw new DomainError('invalid', 'InvalidCount', '_count must be a non-negative integer', '_count');
      // FHIR lets a server return fewer than asked: above the maximum, the maximum.
      count = Math.min(n, MAX_SEARCH_COUNT);
      continue;
    }
    if (name === '_total') {
      const mode = single(name, values);
      if (mode !== 'none' && mode !== 'estimate' && mode !== 'accurate')
        throw new DomainError(
          'invalid',
          'InvalidTotal',
          '_total must be none, estimate or accurate',
          '_total',
        );
      total = mode;
      continue;
    }
    if (name === '_cursor') {
      cursor = decodePageCursor(single(name, values));
      continue;
    }
    if (name === '_sort') {
      sortText = single(name, values);
      const keys = sortText.split(',').filter(Boolean);
      if (keys.length !== 1)
        throw new DomainError(
          'invalid',
          'UnsupportedSort',
          '_sort takes one parameter (with - for descending)',
          '_sort',
        );
      const descending = keys[0]!.startsWith('-');
      const key = descending ? keys[0]!.slice(1) : keys[0]!;
      const parameter = supported.parameters.get(key);
      if (key === '_id' || key === '_lastUpdated') sort = { by: key, descending };
      else if (parameter?.kind === 'element') sort = { by: { element: parameter.element }, descending };
      else if (parameter?.kind === 'indexed' && parameter.definition.type === 'date')
        sort = { by: { date: parameter.definition.code }, descending };
      else
        throw new DomainError(
          'invalid',
          'UnsupportedSort',
          `_sort=${key} is not supported on ${type} (supported: _id, _lastUpdated${[...supported.parameters]
            .filter(([, p]) => isSortable(p))
            .map(([n]) => `, ${n}`)
            .join('')})`,
          '_sort',
        );
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
    const parameter: SearchParameter | undefined = supported.parameters.get(name);
    if (!parameter)
      throw new DomainError(
        'invalid',
        'UnsupportedSearchParameter',
        `search parameter ${name} is not supported on ${type} (supported: ${[...supported.parameters.keys()].join(', ')}, _count, _sort, _total${supported._include ? ', _include' : ''})`,
        name,
        { issueCode: 'not-supported' },
      );
    // A date parameter may be given twice (a range: `date=ge2026-01&date=lt2026-03`), each ANDed.
    if (parameter.kind === 'indexed' && parameter.definition.type === 'date') {
      criteria.dates = [
        ...(criteria.dates ?? []),
        ...values.map((v) => dateCriteria(name, parameter.definition.code, v)),
      ];
      continue;
    }
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
        const slash = v.indexOf('/');
        const idText = slash < 0 ? v : v.slice(0, slash) === target ? v.slice(slash + 1) : '';
        if (!/^\d{1,10}$/.test(idText))
          throw new DomainError(
            'invalid',
            'InvalidReference',
            `${name}=${v} must be ${target}/<id> or <id>`,
            name,
          );
        // A larger id names nothing (docs/interface.md §8): it matches no resource.
        return resourceIdIn(idText) ?? -1;
      });
    switch (parameter.kind) {
      case 'id':
        // Not an id casebook can hold (docs/interface.md §8): it matches nothing.
        criteria.ids = alternatives.map((v) => resourceIdIn(v) ?? -1);
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
      case 'indexed': {
        const { code, type: kind, target } = parameter.definition;
        const entries =
          kind === 'token'
            ? alternatives.map((v) => {
                const token = tokenOf(v);
                return tokenEntry(code, token.system, token.value);
              })
            : alternatives.map((v) => referenceEntry(code, referenceValue(name, v, target ?? [])));
        criteria.tokens = [...(criteria.tokens ?? []), entries];
        break;
      }
    }
  }
  if (cursor && cursor.sort !== sortText)
    throw new DomainError(
      'invalid',
      'InvalidCursor',
      '_cursor belongs to a search with another _sort',
      '_cursor',
    );
  // The cursor's key must be of the order's type: it is cast back in SQL.
  const by = sort?.by ?? '_id';
  if (cursor && !isCursorKeyOf(by, cursor.key.value))
    throw new DomainError('invalid', 'InvalidCursor', '_cursor is not a cursor of this search', '_cursor');
  return { query: criteria, includes, count, total, sortText, sort, cursor };
};

/** A page of a search: the matches the caller may see, the total, the included resources, and the cursors of the neighbouring pages. */
export interface SearchResult {
  readonly matches: readonly ResourceRow[];
  /** Undefined with `_total=none`. */
  readonly total: number | undefined;
  readonly included: readonly ResourceRow[];
  /** `_cursor` of the next page, when there is one. */
  readonly next: string | undefined;
  /** `_cursor` of the previous page, when there is one. */
  readonly previous: string | undefined;
}

/** Rows read per query while filling a page (scopes may hide some rows). */
const CHUNK = 200;

/**
 * FHIR search on `def.type` in the caller's tenant, one page (docs/interface.md §4.3 rule 10, §5.3: only
 * resources its scopes cover). Keyset paging: a page starts after (or, for a previous page, ends
 * before) the row its cursor names, so resources added or removed between pages never make a
 * client skip or see twice the ones that stay.
 * @throws {DomainError} 400 malformed parameters or cursor, 403 no search scope for the type.
 */
export const search = async (
  sql: Sql,
  principal: Principal,
  def: ResourceDefinition,
  parameters: SearchParams,
): Promise<SearchResult> => {
  if (!mayAtAll(principal, 's', def.type)) authorize(principal, 's', { resourceType: def.type });
  const parsed = parseSearch(def.type, parameters);
  const { query, includes, count, sort, cursor } = parsed;
  const backward = cursor?.direction === 'p';
  // One more than the page, to know whether another page follows; read in chunks, scopes filter.
  const found: KeyedRow[] = [];
  let after = cursor?.key;
  if (count > 0)
    for (;;) {
      const chunk = await searchResources(sql, def.type, principal.tenantId, {
        ...query,
        ...(sort ? { sort } : {}),
        ...(after ? { after } : {}),
        backward,
        limit: Math.max(CHUNK, count + 1),
      });
      found.push(...visibleRows(principal, chunk, 's'));
      if (chunk.length < Math.max(CHUNK, count + 1) || found.length > count) break;
      after = chunk.at(-1)!.key;
    }
  const more = found.length > count;
  const page = found.slice(0, count);
  if (backward) page.reverse();
  const make = (direction: 'n' | 'p', row: KeyedRow | undefined) =>
    row ? encodePageCursor({ direction, key: row.key, sort: parsed.sortText }) : undefined;
  // Forward: a next page if more rows follow; a previous one if this page started at a cursor.
  // Backward: the other way round.
  const next = backward ? make('n', page.at(-1) ?? undefined) : more ? make('n', page.at(-1)) : undefined;
  const previous = backward
    ? more
      ? make('p', page[0])
      : undefined
    : cursor
      ? make('p', page[0] ?? undefined)
      : undefined;
  let total: number | undefined;
  // A count before scopes is an estimate only for a caller whose scopes hide no resource of the
  // type; for any other it would tell which identifiers exist (docs/interface.md §4.3 rule 10),
  // so its estimate is the accurate total.
  const mode =
    parsed.total === 'estimate' && !coversEveryResource(principal, 's', def.type) ? 'accurate' : parsed.total;
  if (mode === 'estimate') total = await countResources(sql, def.type, principal.tenantId, query);
  else if (mode === 'accurate' && count > 0 && !cursor && !more) {
    // A first page that holds every match the caller may see (the common search by identifier):
    // its length is the total, without reading the matches again.
    total = page.length;
  } else if (mode === 'accurate') {
    // Every match the caller may see (scopes can hide rows a count would include).
    total = 0;
    let from: SearchKey | undefined;
    for (;;) {
      const chunk = await searchResources(sql, def.type, principal.tenantId, {
        ...query,
        ...(from ? { after: from } : {}),
        limit: 1000,
      });
      total += visibleRows(principal, chunk, 's').length;
      if (chunk.length < 1000) break;
      from = chunk.at(-1)!.key;
    }
  }
  const included: ResourceRow[] = [];
  const include = (rows: readonly ResourceRow[]) => {
    for (const row of visibleRows(principal, rows))
      if (!included.some((i) => i.resourceType === row.resourceType && i.id === row.id)) included.push(row);
  };
  for (const name of includes) {
    const [, element] = name.split(':') as [string, string];
    const parameter = SEARCH_PARAMETERS[def.type].parameters.get(element);
    if (parameter?.kind === 'indexed') {
      // A reference parameter of the R5 definitions: the references its expression finds in each
      // match, to resources of casebook's types by their ids.
      const byType = new Map<ResourceType, Set<number>>();
      for (const row of page)
        for (const reference of referencesOf(def.type, row.resource, parameter.definition)) {
          const [targetType, idText] = reference.split('/') as [string, string | undefined];
          const id = idText === undefined ? undefined : resourceIdIn(idText);
          if (!isResourceType(targetType) || id === undefined) continue;
          byType.set(targetType, (byType.get(targetType) ?? new Set()).add(id));
        }
      for (const [targetType, ids] of byType)
        include(await searchResources(sql, targetType, principal.tenantId, { ids: [...ids], limit: 1000 }));
      continue;
    }
    const target: ResourceType = parameter?.kind === 'encounter' ? 'Encounter' : 'Patient';
    const ids = [
      ...new Set(
        page
          .map((r) => (target === 'Patient' ? r.patientId : r.encounterId))
          .filter((id): id is number => id !== null),
      ),
    ];
    if (ids.length === 0) continue;
    include(await searchResources(sql, target, principal.tenantId, { ids, limit: 1000 }));
  }
  return { matches: page, total, included, next, previous };
};

/** The parameters `$everything` takes (and the formatting ones every interaction ignores). */
const EVERYTHING_PARAMETERS = new Set(['_count', '_cursor', '_format', '_pretty']);

/** `_count` of $everything when none is given, and its maximum. */
export const DEFAULT_EVERYTHING_COUNT = 50;

/** Order of the types in $everything: the Patient first, then its compartment, then what it references. */
const EVERYTHING_ORDER: readonly ResourceType[] = [
  'Patient',
  'Encounter',
  'Task',
  'QuestionnaireResponse',
  'Practitioner',
  'Questionnaire',
];

export interface EverythingPage {
  readonly rows: readonly ResourceRow[];
  readonly total: number;
  /** The `_cursor` of the next page; undefined on the last. */
  readonly next: string | undefined;
}

/**
 * The columns of a compartment row for $everything: the facts the scope checks and the order need,
 * what it links to, and no content — unless the row predates those columns (`practitioner_ids`
 * NULL until a rebuild), whose links are then read from the content.
 */
const EVERYTHING_COLUMNS = `resource_type, id, tenant_id, version_id, last_updated, deleted, patient_id, encounter_id,
  project, author, practitioner_ids, questionnaire, CASE WHEN practitioner_ids IS NULL THEN content END AS content`;

/**
 * `GET /Patient/{id}/$everything` (FHIR R5 Patient-everything; issue 14): the Patient, every live
 * resource of its compartment (Encounter, Task, QuestionnaireResponse), the Practitioners they
 * reference and the Questionnaires its responses answer — each only when the caller may read it —
 * in a stable order (type, then id), paged with a keyset `_cursor`.
 * @throws {DomainError} 404 unknown Patient (or another tenant's), 403 when the Patient itself may
 *   not be read, 410 deleted, 400 malformed `_count`/`_cursor`.
 */
export const everything = async (
  sql: Sql,
  principal: Principal,
  patientId: number,
  params: SearchParams,
): Promise<EverythingPage> => {
  // Every unknown parameter is a 400, as on a search (FHIR's start, end, _since and _type are not
  // implemented: ignoring them would answer more than was asked).
  for (const name of Object.keys(params))
    if (!EVERYTHING_PARAMETERS.has(name))
      throw new DomainError(
        'invalid',
        'UnsupportedParameter',
        `$everything does not support the parameter ${name} (supported: _count, _cursor)`,
        name,
        { issueCode: 'not-supported' },
      );
  const patient = await read(sql, principal, DEFINITIONS.Patient, patientId);
  // Paging reads the compartment's keys and links only, then the content of the page's rows: a
  // Patient with 1,500 reports of 10 KB brought 15 MB into the server for every page of 10.
  const compartment = await sql.query(
    `SELECT ${EVERYTHING_COLUMNS} FROM rm_resources
      WHERE tenant_id = $1 AND patient_id = $2 AND NOT deleted AND resource_type <> 'Patient'`,
    [principal.tenantId, patientId],
  );
  const practitioners = new Set<number>();
  const canonicals = new Set<string>();
  const rows = compartment.map((r) => {
    const row = rowOf(r);
    const links =
      r.practitioner_ids === null
        ? everythingLinksOf(row.resourceType, row.resource)
        : {
            practitionerIds: r.practitioner_ids as number[],
            questionnaire: r.questionnaire as string | null,
          };
    for (const id of links.practitionerIds) practitioners.add(Number(id));
    if (links.questionnaire) canonicals.add(links.questionnaire);
    return row;
  });
  const referenced = [
    ...(practitioners.size
      ? await searchResources(sql, 'Practitioner', principal.tenantId, {
          ids: [...practitioners],
          limit: 1000,
        })
      : []),
    ...(canonicals.size
      ? await searchResources(sql, 'Questionnaire', principal.tenantId, {
          elements: [{ element: 'url', values: [...canonicals].map((c) => c.split('|')[0]!) }],
          limit: 1000,
        })
      : []),
  ];
  const all = visibleRows(principal, [patient, ...rows, ...referenced]).sort(
    (a, b) =>
      EVERYTHING_ORDER.indexOf(a.resourceType) - EVERYTHING_ORDER.indexOf(b.resourceType) || a.id - b.id,
  );
  const countText = Array.isArray(params._count) ? params._count[0] : params._count;
  const count = countText === undefined ? DEFAULT_EVERYTHING_COUNT : countOf(countText);
  if (count === undefined || count < 1)
    throw new DomainError('invalid', 'InvalidCount', '_count must be a positive integer', '_count');
  const size = Math.min(count, 1000);
  const cursorText = Array.isArray(params._cursor) ? params._cursor[0] : params._cursor;
  let start = 0;
  if (cursorText) {
    const m = /^(\d{1,2})-(\d{1,10})$/.exec(Buffer.from(cursorText, 'base64url').toString('utf8'));
    if (!m)
      throw new DomainError(
        'invalid',
        'InvalidCursor',
        '_cursor is not a cursor of this operation',
        '_cursor',
      );
    // Keyset: the first row after (rank, id), so rows added or removed before it shift nothing.
    const [rank, id] = [Number(m[1]), Number(m[2])];
    start = all.findIndex(
      (r) =>
        EVERYTHING_ORDER.indexOf(r.resourceType) > rank ||
        (EVERYTHING_ORDER.indexOf(r.resourceType) === rank && r.id > id),
    );
    if (start < 0) start = all.length;
  }
  const page = all.slice(start, start + size);
  const last = page.at(-1);
  // The content of the page's compartment rows (reads by key, batched); one deleted meanwhile drops out.
  const loaded = await Promise.all(
    page.map((row) =>
      row.resource === null ? readResource(sql, row.resourceType, row.id, principal.tenantId) : row,
    ),
  );
  const next =
    start + size < all.length && last
      ? Buffer.from(`${EVERYTHING_ORDER.indexOf(last.resourceType)}-${last.id}`).toString('base64url')
      : undefined;
  return {
    // Judged again as read: a row changed since the compartment was listed (moved to another
    // patient) is shown only if the caller may still read it.
    rows: visibleRows(
      principal,
      loaded.filter((row): row is ResourceRow => row !== undefined && !row.deleted),
    ),
    total: all.length,
    next,
  };
};
