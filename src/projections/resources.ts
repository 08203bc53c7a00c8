/**
 * Read model of the FHIR resources (issue 3): `rm_resources` holds the current version of each
 * resource as FHIR JSON plus the facts searches and scope checks need (tenant, compartment,
 * project, author); `rm_resource_identifiers` serves search by identifier. `content` is `json`,
 * not `jsonb`, so a resource keeps its element order (resourceType, id, meta first).
 */

import { batchedOnShared } from '../db/batcher.js';
import { bumpSequence } from '../db/sequences.js';
import type { Row, Sql } from '../db/sql.js';
import { comparableIdentifier, comparableText } from '../domain/clinical/identifier.js';
import { PATIENT_ERASED, type PatientErasedData } from '../domain/erasure/erasure.js';
import type { ChangedData, CreatedData, DeletedData, ResourceType } from '../domain/fhir/resource.js';
import { EVENT_NAMES, eventTypesOf, isResourceType, resourceEventKind } from '../domain/fhir/resource.js';
import type { PendingEvent } from '../eventstore/port.js';
import { DEFINITIONS } from '../fhir/definitions.js';
import { compartmentOf, identifiersOf, toFhirResource } from '../fhir/references.js';
import { SEARCH_PARAMETERS } from '../fhir/search.js';
import { searchIndexOf } from '../fhir/search-index.js';
import { type ApplyColumn, applyCall, migrateReadModel, type Projection, rowsParam } from './projection.js';

/** The state of one resource after a batch, written with one statement for the whole batch. */
export interface ResourceRowChange {
  resource_type: ResourceType;
  id: number;
  tenant_id: number | null;
  version_id: number;
  /** FHIR JSON of the version; null for a deletion seen without its content (keeps the stored one). */
  content: Record<string, unknown> | null;
  last_updated: string;
  deleted: boolean;
  patient_id: number | null;
  encounter_id: number | null;
  project: string | null;
  author: string | null;
  /** The batch holds the creation: the row is inserted when missing. */
  created: boolean;
  /** The identifiers the row ends with (search by identifier). */
  identifiers: { system: string; value: string }[];
  /** What $everything follows from the row ({@link everythingLinksOf}); null with `content`. */
  practitioner_ids: number[] | null;
  questionnaire: string | null;
  /** The search index of the content (src/fhir/search-index.ts); null with `content`. */
  search_tokens: string[] | null;
  search_dates: string[] | null;
}

/**
 * What `Patient/$everything` (src/queries/fhir.ts `everything`) follows from a resource of a
 * patient's compartment, kept as columns of `rm_resources` so that paging reads no content: the
 * ids of the Practitioners it references (the references its definition checks,
 * src/fhir/definitions.ts) and the canonical of the Questionnaire it answers.
 */
export const everythingLinksOf = (
  resourceType: ResourceType,
  content: Record<string, unknown>,
): { practitionerIds: number[]; questionnaire: string | null } => ({
  practitionerIds: [
    ...new Set(
      DEFINITIONS[resourceType]
        .references(content)
        .filter((r) => r.resourceType === 'Practitioner')
        .map((r) => r.id),
    ),
  ],
  questionnaire: typeof content.questionnaire === 'string' ? content.questionnaire : null,
});

/**
 * A resource's state within a batch, before its row is made: the version whose content the row
 * ends with (`source`) is rendered once, not every version the batch passes through (a report
 * saved and submitted in one page of a replay is four versions of one row).
 */
interface PendingRow {
  resourceType: ResourceType;
  id: number;
  tenantId: number | null;
  versionId: number;
  lastUpdated: string;
  deleted: boolean;
  created: boolean;
  project: string | null;
  author: string | null;
  /** The last version with content: its number, instant and content; null: none in this batch. */
  source: { versionId: number; at: string; resource: Record<string, unknown> } | null;
  /** Erased with its patient ({@link ERASED_VERSION}): a tombstone row, nothing of its content. */
  erased?: true;
}

/**
 * The version of a row erased with its patient (docs/architecture.md "Erasure"): above any version
 * a resource reaches, so the tombstone replaces whatever row there was and nothing older comes
 * back. Its reads answer 410 Gone, as a deleted resource's.
 */
export const ERASED_VERSION = 2_147_483_647;

/** The row a batch leaves a resource with ({@link foldBatch}). */
const rowOfPending = (p: PendingRow): ResourceRowChange => {
  const { resourceType, id, source } = p;
  const compartment = source ? compartmentOf(resourceType, id, source.resource) : undefined;
  const links = source ? everythingLinksOf(resourceType, source.resource) : undefined;
  const index = source
    ? searchIndexOf(resourceType, source.resource, SEARCH_PARAMETERS[resourceType].indexed)
    : undefined;
  if (p.erased)
    return {
      resource_type: resourceType,
      id,
      tenant_id: p.tenantId,
      version_id: ERASED_VERSION,
      content: { resourceType, id: String(id) },
      last_updated: p.lastUpdated,
      deleted: true,
      patient_id: null,
      encounter_id: null,
      project: null,
      author: null,
      created: true,
      identifiers: [],
      practitioner_ids: null,
      questionnaire: null,
      search_tokens: null,
      search_dates: null,
    };
  return {
    resource_type: resourceType,
    id,
    tenant_id: p.tenantId,
    version_id: p.versionId,
    content: source ? toFhirResource(resourceType, id, source.versionId, source.at, source.resource) : null,
    last_updated: p.lastUpdated,
    deleted: p.deleted,
    patient_id: compartment?.patientId ?? null,
    encounter_id: compartment?.encounterId ?? null,
    project: p.project,
    author: p.author,
    created: p.created,
    // The index holds the NFC form (docs/interface.md §2.5); the content keeps what was sent.
    identifiers: source && !p.deleted ? identifiersOf(source.resource).map(comparableIdentifier) : [],
    practitioner_ids: links?.practitionerIds ?? null,
    questionnaire: links?.questionnaire ?? null,
    search_tokens: index?.tokens ?? null,
    search_dates: index?.dates ?? null,
  };
};

/**
 * Folds a batch into the last state of each resource it touches (pure: the rows the apply
 * functions write; events that are not resource events are skipped).
 */
export const foldBatch = (events: readonly PendingEvent[]): ResourceRowChange[] => {
  const rows = new Map<string, PendingRow>();
  for (const event of events) {
    if (event.type === PATIENT_ERASED) {
      // Every resource of the patient's compartment becomes a tombstone (docs/architecture.md "Erasure").
      const d = event.data as PatientErasedData;
      for (const r of d.resources) {
        if (!isResourceType(r.resourceType)) continue;
        rows.set(`${r.resourceType}/${r.id}`, {
          resourceType: r.resourceType,
          id: r.id,
          tenantId: d.tenantId,
          versionId: ERASED_VERSION,
          lastUpdated: d.at,
          deleted: true,
          created: true,
          project: null,
          author: null,
          source: null,
          erased: true,
        });
      }
      continue;
    }
    const kind = resourceEventKind(event.type);
    if (!kind) continue;
    const { resourceType } = kind;
    const versionId = Number(event.revision) + 1;
    const id = (event.data as { id: number }).id;
    const key = `${resourceType}/${id}`;
    const previous = rows.get(key);
    // An event at or below a version this batch already holds was delivered again: no change.
    if (previous && versionId <= previous.versionId) continue;
    if (kind.kind === 'deleted') {
      // A deletion keeps the content the row had (the stored one when the batch has none).
      const d = event.data as DeletedData;
      rows.set(key, {
        ...(previous ?? {
          resourceType,
          id,
          tenantId: event.metadata.tenantId,
          created: false,
          project: null,
          author: null,
          source: null,
        }),
        versionId,
        lastUpdated: d.at,
        deleted: true,
      });
      continue;
    }
    const d = event.data as CreatedData | ChangedData;
    const created = kind.kind === 'created' ? (d as CreatedData) : undefined;
    rows.set(key, {
      resourceType,
      id,
      tenantId: created?.tenantId ?? previous?.tenantId ?? event.metadata.tenantId,
      versionId,
      lastUpdated: d.at,
      deleted: false,
      created: created !== undefined || (previous?.created ?? false),
      project: created ? (created.project ?? null) : (previous?.project ?? null),
      author: created ? (created.author ?? null) : (previous?.author ?? null),
      source: { versionId, at: d.at, resource: d.resource },
    });
  }
  return Array.from(rows.values(), rowOfPending);
};

// One statement per batch, in a function an append can call in its own statement: creations are
// inserted (or update an older row), other changes update rows below their version; identifiers
// follow every row written. The DELETE and INSERT of identifiers never touch the same row, so they
// are safe in one statement.
// One body, rm_resources_write, behind two entry points (src/projections/sql/resources/002_one_body.sql): rm_resources_apply, for a small batch, reaches
// its rows by their keys; the planner counts json_to_recordset as 100 rows and, against a table of
// a few thousand rows, joined the batch by a sequential scan of rm_resources or
// rm_resource_identifiers (an update at 8,000 Patients: 1.6 ms instead of 80 us).
// rm_resources_apply_bulk takes a rebuild's pages (a replay ran ~30 % slower with the keyed plan),
// as parallel arrays.
const APPLY_FUNCTION = 'rm_resources_apply';
/**
 * The columns of a {@link ResourceRowChange} as the apply functions take them: the attributes of
 * the SQL type `rm_resources_change`, and the bulk function's parameters, in this order (a test
 * holds both to it).
 */
export const APPLY_COLUMNS: readonly ApplyColumn[] = [
  { name: 'resource_type', type: 'text' },
  { name: 'id', type: 'integer' },
  { name: 'tenant_id', type: 'integer' },
  { name: 'version_id', type: 'integer' },
  { name: 'content', type: 'json' },
  { name: 'last_updated', type: 'timestamptz' },
  { name: 'deleted', type: 'boolean' },
  { name: 'patient_id', type: 'integer' },
  { name: 'encounter_id', type: 'integer' },
  { name: 'project', type: 'text' },
  { name: 'author', type: 'text' },
  { name: 'created', type: 'boolean' },
  { name: 'identifiers', type: 'json' },
  { name: 'practitioner_ids', type: 'integer[]' },
  { name: 'questionnaire', type: 'text' },
  { name: 'search_tokens', type: 'text[]' },
  { name: 'search_dates', type: 'text[]' },
];

/** Every resource event type (Patient, Encounter, …), from the decider's names. */
const RESOURCE_EVENT_TYPES = new Set(Object.values(EVENT_NAMES).flatMap(eventTypesOf));

export const resourcesProjection: Projection = {
  name: 'resources',
  tables: ['rm_resources', 'rm_resource_identifiers'],
  migrate: (sql) => migrateReadModel(sql, 'resources'),
  handles: (type) => RESOURCE_EVENT_TYPES.has(type) || type === PATIENT_ERASED,
  inline: {
    function: APPLY_FUNCTION,
    argument: (events) => {
      const rows = foldBatch(events);
      return rows.length === 0 ? undefined : rowsParam(rows);
    },
  },
  apply: async (events, tx, mode) => {
    const rows = foldBatch(events);
    if (rows.length === 0) return;
    const call = applyCall(APPLY_FUNCTION, APPLY_COLUMNS, rows);
    await tx.query(call.text, call.values);
    if (mode === 'catch-up') {
      const highest = new Map<ResourceType, number>();
      for (const row of rows)
        if (row.created)
          highest.set(row.resource_type, Math.max(highest.get(row.resource_type) ?? 0, row.id));
      for (const [type, id] of highest) await bumpSequence(tx, type, id);
    }
  },
};

/** A row of `rm_resources`. */
export interface ResourceRow {
  readonly resourceType: ResourceType;
  readonly id: number;
  readonly tenantId: number;
  readonly versionId: number;
  /** Full FHIR JSON of the current version. */
  readonly resource: Record<string, unknown>;
  /**
   * The same as stored JSON text, when the row was read as text ({@link readResource}): an answer
   * can send it as it is, and `resource` is parsed only if something looks inside.
   */
  readonly json?: string;
  readonly lastUpdated: Date;
  readonly deleted: boolean;
  readonly patientId: number | null;
  readonly encounterId: number | null;
  readonly project: string | null;
  readonly author: string | null;
}

/** A `rm_resources` row as selected (`SELECT *`) → {@link ResourceRow}. */
export const rowOf = (r: Record<string, unknown>): ResourceRow => ({
  resourceType: r.resource_type as ResourceType,
  id: Number(r.id),
  tenantId: Number(r.tenant_id),
  versionId: Number(r.version_id),
  resource: r.content as Record<string, unknown>,
  lastUpdated: new Date(r.last_updated as string | Date),
  deleted: Boolean(r.deleted),
  patientId: r.patient_id === null ? null : Number(r.patient_id),
  encounterId: r.encounter_id === null ? null : Number(r.encounter_id),
  project: (r.project as string | null) ?? null,
  author: (r.author as string | null) ?? null,
});

/** The columns of a read: the content as text, answered as stored without parsing it again. */
const READ_COLUMNS = `resource_type, id, tenant_id, version_id, content::text AS content_json, last_updated, deleted,
            patient_id, encounter_id, project, author`;
/** One resource by key. */
const READ_ONE = `SELECT ${READ_COLUMNS} FROM rm_resources WHERE resource_type = $1 AND id = $2 AND tenant_id = $3`;
/**
 * Several resources by key, each row with the 1-based place `n` of its key: one primary-key lookup
 * per key, in a function that plans once per connection (sql/resources/003_batched_reads.sql).
 */
const READ_MANY = `SELECT * FROM rm_resources_read_keys($1::text[], $2::int[], $3::int[])`;
/** Most reads one statement carries. */
const READ_BATCH_MAX = 100;

interface ReadKey {
  readonly type: ResourceType;
  readonly id: number;
  readonly tenantId: number;
}

/** Runs the reads of `keys` in one statement; answers each key's row (undefined: none) in order. */
const readRows = async (sql: Sql, keys: readonly ReadKey[]): Promise<(Row | undefined)[]> => {
  if (keys.length === 1) {
    const [key] = keys as [ReadKey];
    return [(await sql.query(READ_ONE, [key.type, key.id, key.tenantId]))[0]];
  }
  const rows = await sql.query(READ_MANY, [
    keys.map((k) => k.type),
    keys.map((k) => k.id),
    keys.map((k) => k.tenantId),
  ]);
  const byPlace: (Row | undefined)[] = new Array(keys.length);
  for (const row of rows) byPlace[Number(row.n) - 1] = row;
  return byPlace;
};

/**
 * Reads one key: reads that arrive together on a shared handle (the pool, PGlite) share a
 * statement; in a transaction or on a held connection each goes alone.
 */
const readRow = batchedOnShared(readRows, READ_BATCH_MAX);

/**
 * The resource `type/id` of `tenantId` (deleted ones too), or undefined — other tenants' read as
 * missing. Reads that arrive together on the pool share one statement (docs/architecture.md
 * "Reads"): a read sent while another is in flight waits for it, so it sees every write committed
 * before it was asked, as a read of its own would.
 * @param id a resource id (docs/interface.md §8: at most 2,147,483,647).
 */
export const readResource = async (
  sql: Sql,
  type: ResourceType,
  id: number,
  tenantId: number,
): Promise<ResourceRow | undefined> => {
  const r = await readRow(sql, { type, id, tenantId });
  if (!r) return undefined;
  const json = r.content_json as string;
  let parsed: Record<string, unknown> | undefined;
  return {
    ...rowOf(r),
    json,
    get resource() {
      parsed ??= JSON.parse(json) as Record<string, unknown>;
      return parsed;
    },
  };
};

/**
 * Patient `patientId` of `tenantId` and every resource of its compartment (their patient column),
 * deleted ones included, by reference: what an erasure erases (docs/architecture.md "Erasure").
 * Rows already erased are left out. `lastUpdated`: each one's last change.
 */
export const patientCompartment = async (
  sql: Sql,
  tenantId: number,
  patientId: number,
): Promise<{ resourceType: ResourceType; id: number; lastUpdated: Date }[]> => {
  const rows = await sql.query<{ resource_type: ResourceType; id: number; last_updated: Date | string }>(
    `SELECT resource_type, id, last_updated FROM rm_resources
      WHERE tenant_id = $1 AND version_id < $3
        AND (patient_id = $2 OR (resource_type = 'Patient' AND id = $2))
      ORDER BY resource_type, id`,
    [tenantId, patientId, ERASED_VERSION],
  );
  return rows.map((r) => ({
    resourceType: r.resource_type,
    id: Number(r.id),
    lastUpdated: new Date(r.last_updated),
  }));
};

/** Every Patient erased (its row a tombstone, {@link ERASED_VERSION}), by tenant and id. */
export const erasedPatients = async (sql: Sql): Promise<{ tenantId: number; id: number }[]> =>
  (
    await sql.query<{ tenant_id: number; id: number }>(
      `SELECT tenant_id, id FROM rm_resources WHERE resource_type = 'Patient' AND version_id = $1 ORDER BY 1, 2`,
      [ERASED_VERSION],
    )
  ).map((r) => ({ tenantId: Number(r.tenant_id), id: Number(r.id) }));

/** Search criteria the data server supports, all ANDed; values within one criterion are ORed. */
export interface ResourceQuery {
  readonly ids?: readonly number[];
  /** Token search: `system|value`, `|value` (no system) or `value` (any system). */
  readonly identifiers?: readonly { system: string | undefined; value: string }[];
  readonly patientIds?: readonly number[];
  readonly encounterIds?: readonly number[];
  /** Equality on a top-level string element of the content (e.g. url, version). */
  readonly elements?: readonly { element: string; values: readonly string[] }[];
  /**
   * Token and reference parameters of the R5 definitions: per criterion, the index entries
   * (src/fhir/search-index.ts) of which the resource must hold one.
   */
  readonly tokens?: readonly (readonly string[])[];
  /** Date parameters of the R5 definitions: per criterion, alternatives of which one must hold. */
  readonly dates?: readonly (readonly DateCriterion[])[];
  /** Order (default: by id ascending); always tie-broken by id, so the order is total. */
  readonly sort?: SearchSort;
  /** Keyset: only rows strictly after this one in the order (before it with `backward`). */
  readonly after?: SearchKey;
  /** Walk the order backwards from `after` (a previous page); rows come newest-first in that case. */
  readonly backward?: boolean;
  readonly limit: number;
}

/**
 * One date search value (FHIR R5 search.html#date): the instants it covers as `[start, end)` in
 * the index's ISO form, compared with each date the resource holds for `code` by `prefix`.
 */
export interface DateCriterion {
  readonly code: string;
  readonly prefix: 'eq' | 'ne' | 'gt' | 'lt' | 'ge' | 'le' | 'sa' | 'eb' | 'ap';
  readonly start: string;
  readonly end: string;
}

/** A date criterion as SQL over one index entry `d` (`code|start|end`), FHIR R5 search.html#prefix. */
const DATE_COMPARISONS: Record<DateCriterion['prefix'], string> = {
  eq: 'ds >= $s AND de <= $e',
  ne: '(ds < $s OR de > $e)',
  gt: 'de > $e',
  lt: 'ds < $s',
  ge: 'de > $s',
  le: 'ds < $e',
  sa: 'ds >= $e',
  eb: 'de <= $s',
  ap: 'ds < $e AND de > $s',
};

/**
 * A search order (docs/interface.md §4.4 "Paging"): `_id`, `_lastUpdated`, or a top-level string
 * element of the content (`url`, `version`, `status`, …); `descending` for `-name`.
 */
export interface SearchSort {
  readonly by:
    | '_id'
    | '_lastUpdated'
    | { readonly element: string }
    /** A date parameter of the R5 definitions: by the earliest instant the resource holds for it. */
    | { readonly date: string };
  readonly descending: boolean;
}

/** A row's place in a {@link SearchSort}: its sort value (text) and id. */
export interface SearchKey {
  readonly value: string;
  readonly id: number;
}

/** A search row and its {@link SearchKey} in the search's order. */
export type KeyedRow = ResourceRow & { readonly key: SearchKey };

/** The WHERE clause (and its parameters) of a search; `param` adds a parameter. */
const searchWhere = (type: ResourceType, tenantId: number, query: Omit<ResourceQuery, 'limit'>) => {
  const params: unknown[] = [type, tenantId];
  const where = ['r.resource_type = $1', 'r.tenant_id = $2', 'NOT r.deleted'];
  const param = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  if (query.ids) where.push(`r.id = ANY(${param(query.ids.map(Number))}::int[])`);
  if (query.patientIds) where.push(`r.patient_id = ANY(${param(query.patientIds.map(Number))}::int[])`);
  if (query.encounterIds) where.push(`r.encounter_id = ANY(${param(query.encounterIds.map(Number))}::int[])`);
  if (query.identifiers) {
    // The index holds system and value in NFC: the search value is compared in that form.
    const alternatives = query.identifiers.map((i) =>
      i.system === undefined
        ? `(i.value = ${param(comparableText(i.value))})`
        : i.system === ''
          ? `(i.value = ${param(comparableText(i.value))} AND i.system = '')`
          : `(i.system = ${param(comparableText(i.system))} AND i.value = ${param(comparableText(i.value))})`,
    );
    where.push(
      `EXISTS (SELECT 1 FROM rm_resource_identifiers i WHERE i.resource_type = r.resource_type AND i.tenant_id = r.tenant_id AND i.id = r.id AND (${alternatives.join(' OR ')}))`,
    );
  }
  for (const { element, values } of query.elements ?? [])
    where.push(`r.content->>${param(element)} = ANY(${param([...values])}::text[])`);
  for (const entries of query.tokens ?? []) where.push(`r.search_tokens && ${param([...entries])}::text[]`);
  for (const alternatives of query.dates ?? []) {
    const tests = alternatives.map((c) => {
      // Only the bounds the comparison names become parameters (an unused one has no type).
      const template = DATE_COMPARISONS[c.prefix];
      const start = template.includes('$s') ? `${param(c.start)}::text COLLATE "C"` : '';
      const end = template.includes('$e') ? `${param(c.end)}::text COLLATE "C"` : '';
      const comparison = template.replaceAll('$s', start).replaceAll('$e', end);
      return `(d.code = ${param(c.code)} AND ${comparison})`;
    });
    where.push(
      // Compared byte-wise (COLLATE "C"): the index's fixed-width UTC ISO text sorts as time.
      `EXISTS (SELECT 1 FROM (SELECT split_part(x, '|', 1) AS code, split_part(x, '|', 2) COLLATE "C" AS ds, split_part(x, '|', 3) COLLATE "C" AS de FROM unnest(r.search_dates) x) d WHERE ${tests.join(' OR ')})`,
    );
  }
  return { where, params, param };
};

/** A search by one `system|value` identifier, first page, by id: the shape batched together. */
interface IdentifierSearch {
  readonly type: ResourceType;
  readonly tenantId: number;
  readonly system: string;
  readonly value: string;
  readonly limit: number;
}

/**
 * Several searches by identifier, each row with the 1-based place `n` of its search: per search,
 * the same rows in the same order as {@link searchResources} gives it alone (live resources of the
 * type in the tenant holding that identifier, by id, at most `limit`); a function that plans once
 * per connection (sql/resources/003_batched_reads.sql).
 */
const SEARCH_IDENTIFIERS = `SELECT * FROM rm_resources_search_identifiers($1::text[], $2::int[], $3::text[],
  $4::text[], $5::int[])`;

/** The search as an {@link IdentifierSearch}, when it has exactly that shape. */
const identifierSearch = (
  type: ResourceType,
  tenantId: number,
  query: ResourceQuery,
): IdentifierSearch | undefined => {
  const [identifier, ...others] = query.identifiers ?? [];
  if (!identifier || others.length > 0 || !identifier.system) return undefined;
  if (
    query.ids ||
    query.patientIds ||
    query.encounterIds ||
    query.elements?.length ||
    query.tokens?.length ||
    query.dates?.length
  )
    return undefined;
  if (query.after || query.backward || (query.sort && (query.sort.by !== '_id' || query.sort.descending)))
    return undefined;
  return {
    type,
    tenantId,
    system: comparableText(identifier.system),
    value: comparableText(identifier.value),
    limit: query.limit,
  };
};

/** Runs `searches`: alone as {@link searchRows}, several in one statement. */
const searchIdentifiers = async (sql: Sql, searches: readonly IdentifierSearch[]): Promise<KeyedRow[][]> => {
  if (searches.length === 1) {
    const [only] = searches as [IdentifierSearch];
    return [
      await searchRows(sql, only.type, only.tenantId, {
        identifiers: [{ system: only.system, value: only.value }],
        limit: only.limit,
      }),
    ];
  }
  const rows = await sql.query(SEARCH_IDENTIFIERS, [
    searches.map((q) => q.type),
    searches.map((q) => q.tenantId),
    searches.map((q) => q.system),
    searches.map((q) => q.value),
    searches.map((q) => q.limit),
  ]);
  const found: KeyedRow[][] = searches.map(() => []);
  for (const r of rows) found[Number(r.n) - 1]!.push(keyedRow(r));
  return found;
};

/** Runs one search by identifier: together with the others that arrive on a shared handle. */
const searchByIdentifier = batchedOnShared(searchIdentifiers, READ_BATCH_MAX);

/**
 * Live resources of `type` in the tenant matching `query`, in `query.sort` order (default by id).
 * Searches by one `system|value` identifier (the first page, by id: how EHRs look a patient up)
 * that arrive together on a shared handle go in one statement, as reads by id do
 * (docs/architecture.md "Reads").
 */
export const searchResources = (
  sql: Sql,
  type: ResourceType,
  tenantId: number,
  query: ResourceQuery,
): Promise<KeyedRow[]> => {
  const byIdentifier = identifierSearch(type, tenantId, query);
  return byIdentifier ? searchByIdentifier(sql, byIdentifier) : searchRows(sql, type, tenantId, query);
};

/** A search row with its key in the order by id (`sort_key`: the key as text). */
const keyedRow = (r: Row): KeyedRow => ({
  ...rowOf(r),
  key: { value: String(r.sort_key), id: Number(r.id) },
});

/** One search, one statement. */
const searchRows = async (
  sql: Sql,
  type: ResourceType,
  tenantId: number,
  query: ResourceQuery,
): Promise<KeyedRow[]> => {
  const { where, params, param } = searchWhere(type, tenantId, query);
  const by = query.sort?.by ?? '_id';
  // The sort value as SQL, and the cast of a cursor's text back to it.
  const [expression, cast] =
    by === '_id'
      ? ['r.id', 'int']
      : by === '_lastUpdated'
        ? ['r.last_updated', 'timestamptz']
        : 'date' in by
          ? [
              `coalesce((SELECT min(split_part(x, '|', 2)) FROM unnest(r.search_dates) x WHERE split_part(x, '|', 1) = ${param(by.date)}::text), '')`,
              'text',
            ]
          : [`coalesce(r.content->>${param(by.element)}, '')`, 'text'];
  // Descending order walked backwards is ascending, and the other way round.
  const descending = (query.sort?.descending ?? false) !== (query.backward ?? false);
  if (query.after) {
    const op = descending ? '<' : '>';
    where.push(
      `(${expression}, r.id) ${op} (${param(query.after.value)}::${cast}, ${param(query.after.id)}::int)`,
    );
  }
  const direction = descending ? 'DESC' : 'ASC';
  // The key as text a cursor can carry and cast back: an instant with microseconds in UTC.
  const keyText =
    by === '_lastUpdated'
      ? `to_char(r.last_updated AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
      : `(${expression})::text`;
  const rows = await sql.query(
    `SELECT r.*, ${keyText} AS sort_key FROM rm_resources r WHERE ${where.join(' AND ')}
      ORDER BY ${expression} ${direction}, r.id ${direction} LIMIT ${param(query.limit)}`,
    params,
  );
  return rows.map(keyedRow);
};

/**
 * How many live resources of `type` in the tenant match `query`, without any scope check (the
 * `_total=estimate` of a caller whose scopes may hide some).
 */
export const countResources = async (
  sql: Sql,
  type: ResourceType,
  tenantId: number,
  query: Omit<ResourceQuery, 'limit'>,
): Promise<number> => {
  const { where, params } = searchWhere(type, tenantId, query);
  const [row] = await sql.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM rm_resources r WHERE ${where.join(' AND ')}`,
    params,
  );
  return Number(row?.n ?? 0);
};

/** A resource that references another: its type, id and the facts a scope decision needs. */
export interface ReferencingRow {
  readonly resourceType: ResourceType;
  readonly id: number;
  readonly patientId: number | null;
  readonly author: string | null;
  readonly project: string | null;
}

/**
 * Live resources of `types` whose compartment column (`patient_id` or `encounter_id`) is `id`, in
 * type and id order, without their content.
 */
export const referencingResources = async (
  sql: Sql,
  tenantId: number,
  column: 'patient_id' | 'encounter_id',
  id: number,
  types: readonly ResourceType[],
): Promise<ReferencingRow[]> => {
  if (types.length === 0) return [];
  const rows = await sql.query<{
    resource_type: ResourceType;
    id: number;
    patient_id: number | null;
    author: string | null;
    project: string | null;
  }>(
    `SELECT resource_type, id, patient_id, author, project FROM rm_resources WHERE tenant_id = $1 AND ${column} = $2 AND resource_type = ANY($3::text[]) AND NOT deleted ORDER BY resource_type, id`,
    [tenantId, id, [...types]],
  );
  return rows.map((r) => ({
    resourceType: r.resource_type,
    id: Number(r.id),
    patientId: r.patient_id === null ? null : Number(r.patient_id),
    author: r.author,
    project: r.project,
  }));
};
