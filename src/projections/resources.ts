/**
 * Read model of the FHIR resources (issue 3): `rm_resources` holds the current version of each
 * resource as FHIR JSON plus the facts searches and scope checks need (tenant, compartment,
 * project, author); `rm_resource_identifiers` serves search by identifier. `content` is `json`,
 * not `jsonb`, so a resource keeps its element order (resourceType, id, meta first).
 */
import type { Sql } from '../db/sql.js';
import type { ChangedData, CreatedData, ResourceType } from '../domain/fhir/resource.js';
import { resourceEventKind } from '../domain/fhir/resource.js';
import { compartmentOf, identifiersOf, toFhirResource } from '../fhir/references.js';
import type { Projection } from './projection.js';
import { bumpSequence } from './sequences.js';

const writeIdentifiers = async (
  tx: Sql,
  resourceType: ResourceType,
  id: number,
  tenantId: number,
  content: CreatedData['resource'],
) => {
  await tx.query(`DELETE FROM rm_resource_identifiers WHERE resource_type = $1 AND id = $2`, [
    resourceType,
    id,
  ]);
  for (const { system, value } of identifiersOf(content))
    await tx.query(
      `INSERT INTO rm_resource_identifiers (resource_type, tenant_id, system, value, id) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT DO NOTHING`,
      [resourceType, tenantId, system, value, id],
    );
};

export const resourcesProjection: Projection = {
  name: 'resources',
  tables: ['rm_resources', 'rm_resource_identifiers'],
  migrate: (sql) =>
    sql.exec(`CREATE TABLE IF NOT EXISTS rm_resources (
      resource_type text NOT NULL,
      id integer NOT NULL,
      tenant_id integer NOT NULL,
      version_id integer NOT NULL,
      content json NOT NULL,
      last_updated timestamptz NOT NULL,
      deleted boolean NOT NULL,
      patient_id integer,
      encounter_id integer,
      project text,
      author text,
      PRIMARY KEY (resource_type, id)
    );
    CREATE INDEX IF NOT EXISTS rm_resources_patient ON rm_resources (tenant_id, patient_id);
    CREATE INDEX IF NOT EXISTS rm_resources_encounter ON rm_resources (tenant_id, encounter_id);
    CREATE TABLE IF NOT EXISTS rm_resource_identifiers (
      resource_type text NOT NULL,
      tenant_id integer NOT NULL,
      system text NOT NULL,
      value text NOT NULL,
      id integer NOT NULL,
      PRIMARY KEY (resource_type, tenant_id, system, value, id)
    );`),
  apply: async (event, tx) => {
    const kind = resourceEventKind(event.type);
    if (!kind) return;
    const { resourceType } = kind;
    const versionId = Number(event.revision) + 1;
    if (kind.kind === 'created') {
      const d = event.data as CreatedData;
      const { patientId, encounterId } = compartmentOf(resourceType, d.id, d.resource);
      const inserted = await tx.query(
        `INSERT INTO rm_resources (resource_type, id, tenant_id, version_id, content, last_updated, deleted, patient_id, encounter_id, project, author)
         VALUES ($1, $2, $3, $4, $5::json, $6, false, $7, $8, $9, $10) ON CONFLICT (resource_type, id) DO NOTHING RETURNING id`,
        [
          resourceType,
          d.id,
          d.tenantId,
          versionId,
          JSON.stringify(toFhirResource(resourceType, d.id, versionId, d.at, d.resource)),
          d.at,
          patientId ?? null,
          encounterId ?? null,
          d.project ?? null,
          d.author ?? null,
        ],
      );
      // A creation delivered again after later versions must not bring its old identifiers back.
      if (inserted.length > 0) await writeIdentifiers(tx, resourceType, d.id, d.tenantId, d.resource);
      await bumpSequence(tx, resourceType, d.id);
      return;
    }
    if (kind.kind === 'deleted') {
      const d = event.data as { id: number; at: string };
      // Idempotent: a replayed older event never overwrites a newer version.
      await tx.query(
        `UPDATE rm_resources SET deleted = true, version_id = $3, last_updated = $4 WHERE resource_type = $1 AND id = $2 AND version_id < $3`,
        [resourceType, d.id, versionId, d.at],
      );
      await tx.query(`DELETE FROM rm_resource_identifiers WHERE resource_type = $1 AND id = $2`, [
        resourceType,
        d.id,
      ]);
      return;
    }
    const d = event.data as ChangedData;
    const { patientId, encounterId } = compartmentOf(resourceType, d.id, d.resource);
    const rows = await tx.query<{ tenant_id: number }>(
      `UPDATE rm_resources SET content = $3::json, version_id = $4, last_updated = $5, deleted = false, patient_id = $6, encounter_id = $7
       WHERE resource_type = $1 AND id = $2 AND version_id < $4 RETURNING tenant_id`,
      [
        resourceType,
        d.id,
        JSON.stringify(toFhirResource(resourceType, d.id, versionId, d.at, d.resource)),
        versionId,
        d.at,
        patientId ?? null,
        encounterId ?? null,
      ],
    );
    if (rows[0]) await writeIdentifiers(tx, resourceType, d.id, Number(rows[0].tenant_id), d.resource);
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
  readonly lastUpdated: Date;
  readonly deleted: boolean;
  readonly patientId: number | null;
  readonly encounterId: number | null;
  readonly project: string | null;
  readonly author: string | null;
}

const toRow = (r: Record<string, unknown>): ResourceRow => ({
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

/** The resource `type/id` of `tenantId` (deleted ones too), or undefined — other tenants' read as missing. */
export const readResource = async (
  sql: Sql,
  type: ResourceType,
  id: number,
  tenantId: number,
): Promise<ResourceRow | undefined> => {
  const rows = await sql.query(
    `SELECT * FROM rm_resources WHERE resource_type = $1 AND id = $2 AND tenant_id = $3`,
    [type, id, tenantId],
  );
  return rows[0] ? toRow(rows[0]) : undefined;
};

/** Search criteria the data server supports, all ANDed; values within one criterion are ORed. */
export interface ResourceQuery {
  readonly ids?: readonly number[];
  /** Token search: `system|value`, `|value` (no system) or `value` (any system). */
  readonly identifiers?: readonly { system: string | undefined; value: string }[];
  readonly patientIds?: readonly number[];
  readonly encounterIds?: readonly number[];
  /** Equality on a top-level string element of the content (e.g. url, version). */
  readonly elements?: readonly { element: string; values: readonly string[] }[];
  readonly limit: number;
}

/** Live resources of `type` in the tenant matching `query`, ordered by id. */
export const searchResources = async (
  sql: Sql,
  type: ResourceType,
  tenantId: number,
  query: ResourceQuery,
): Promise<ResourceRow[]> => {
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
    const alternatives = query.identifiers.map((i) =>
      i.system === undefined
        ? `(i.value = ${param(i.value)})`
        : i.system === ''
          ? `(i.value = ${param(i.value)} AND i.system = '')`
          : `(i.system = ${param(i.system)} AND i.value = ${param(i.value)})`,
    );
    where.push(
      `EXISTS (SELECT 1 FROM rm_resource_identifiers i WHERE i.resource_type = r.resource_type AND i.tenant_id = r.tenant_id AND i.id = r.id AND (${alternatives.join(' OR ')}))`,
    );
  }
  for (const { element, values } of query.elements ?? [])
    where.push(`r.content->>${param(element)} = ANY(${param([...values])}::text[])`);
  const rows = await sql.query(
    `SELECT r.* FROM rm_resources r WHERE ${where.join(' AND ')} ORDER BY r.id LIMIT ${param(query.limit)}`,
    params,
  );
  return rows.map(toRow);
};

/** Live resources of `types` whose compartment column (`patient_id` or `encounter_id`) is `id`, as `Type/id`. */
export const referencingResources = async (
  sql: Sql,
  tenantId: number,
  column: 'patient_id' | 'encounter_id',
  id: number,
  types: readonly ResourceType[],
): Promise<string[]> => {
  if (types.length === 0) return [];
  const rows = await sql.query<{ resource_type: string; id: number }>(
    `SELECT resource_type, id FROM rm_resources WHERE tenant_id = $1 AND ${column} = $2 AND resource_type = ANY($3::text[]) AND NOT deleted ORDER BY resource_type, id`,
    [tenantId, id, [...types]],
  );
  return rows.map((r) => `${r.resource_type}/${r.id}`);
};
