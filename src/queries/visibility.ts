/**
 * What a caller may see: the one rule behind every read of a resource for a caller
 * (docs/architecture.md "Security"; docs/interface.md §5.3 rule 1; issue 33).
 *
 * A resource is shown to a principal only when the principal's scopes cover it as it stands in
 * what is shown: the current version for a read, a search match or a resource loaded by the app
 * host; each version on its own for history and vread; the resource a conditional interaction
 * matched before its answer names it. The scope decision itself is `isAllowed` of
 * src/fhir/access.ts (v2 scopes, `patient/` compartment, `user/` authorship, Questionnaire
 * projects); this module is where every path that shows a caller a resource asks it, so a new
 * path reads through here and cannot forget it. Routes and the app host read resources only
 * through the query layer (test/architecture/layers.test.ts holds them to it).
 */
import type { Sql } from '../db/sql.js';
import { patientErased } from '../domain/erasure/erasure.js';
import type { Content, ResourceType } from '../domain/fhir/resource.js';
import {
  type AccessTarget,
  authorize,
  isAllowed,
  type Principal,
  targetOf,
  targetOfContent,
} from '../fhir/access.js';
import {
  ERASED_VERSION,
  type KeyedRow,
  type ResourceQuery,
  type ResourceRow,
  readResource,
  searchResources,
} from '../projections/resources.js';

export type { KeyedRow, ResourceQuery, ResourceRow };

/** How a resource is shown: read (`r`: a read, a version, a resource shown with another) or found by a search (`s`). */
export type Sight = 'r' | 's';

/**
 * The rule: may `principal` see the resource whose facts are `target` (docs/interface.md §5.3)?
 * @param sight `s` for the matches of a search, `r` for everything else.
 */
export const visibleTo = (principal: Principal, target: AccessTarget, sight: Sight = 'r'): boolean =>
  isAllowed(principal, sight, target);

/** The rows `principal` may see, in their order (rows already read: nothing is read again). */
export const visibleRows = <R extends ResourceRow>(
  principal: Principal,
  rows: readonly R[],
  sight: Sight = 'r',
): R[] => rows.filter((row) => visibleTo(principal, targetOf(row), sight));

/**
 * The facts of one version of a resource, for {@link visibleTo}: its patient from that version's
 * content (a Task or QuestionnaireResponse moved to another patient was about the first one
 * before), its author and project from the resource's creation.
 */
export const versionTarget = (
  type: ResourceType,
  id: number,
  content: Content,
  created: { readonly author?: string | undefined; readonly project?: string | undefined },
): AccessTarget =>
  targetOfContent(type, id, content, { author: created.author ?? null, project: created.project ?? null });

/**
 * A resource of the caller's tenant, for the caller: the row (deleted ones too, which the caller
 * answers 410), or undefined when the tenant holds no such resource (another tenant's included).
 * One read by key, as the read model's batched reads by id.
 * @throws {DomainError} 403 `forbidden` when it exists and the caller may not read it; 410
 *   `PatientErased` when it was erased with its patient (docs/architecture.md "Erasure").
 */
export const readVisible = async (
  sql: Sql,
  principal: Principal,
  type: ResourceType,
  id: number,
): Promise<ResourceRow | undefined> => {
  const row = await readResource(sql, type, id, principal.tenantId);
  // Erased with its patient: gone for every caller of the tenant, whatever its scopes (the row
  // names no patient any more, so a scope check could only say "denied").
  if (row?.versionId === ERASED_VERSION) throw patientErased(`${type}/${id}`);
  if (row) authorize(principal, 'r', targetOf(row));
  return row;
};

/**
 * A live resource of the caller's tenant the caller may read, or undefined (unknown, deleted, or
 * hidden by the scopes alike): for lookups whose answer to the caller is "not available" whatever
 * the reason (a form that cannot be offered).
 */
export const readIfVisible = async (
  sql: Sql,
  principal: Principal,
  type: ResourceType,
  id: number,
): Promise<ResourceRow | undefined> => {
  const row = await readResource(sql, type, id, principal.tenantId);
  return row && !row.deleted && visibleTo(principal, targetOf(row)) ? row : undefined;
};

/**
 * The live resources of `type` in the caller's tenant that match `query` and that the caller may
 * see, in the query's order. At most `query.limit` rows are read, so fewer may come back.
 */
export const findVisible = async (
  sql: Sql,
  principal: Principal,
  type: ResourceType,
  query: ResourceQuery,
  sight: Sight = 'r',
): Promise<KeyedRow[]> =>
  visibleRows(principal, await searchResources(sql, type, principal.tenantId, query), sight);

/**
 * The ValueSets a form names, seen with the form's rights (issue 32; docs/interface.md §4.4): the
 * live ValueSets of the caller's tenant matching `query`, whatever the caller's scopes say about
 * ValueSets — the one exception to {@link visibleTo}. Only for the `answerValueSet` canonicals of a
 * Questionnaire the caller may see (src/http/sdc/resolve.ts `formResolver` asks for nothing else):
 * a clinician who may fill in the form sees its answer lists, which are terminology, not records.
 */
export const findFormValueSets = async (
  sql: Sql,
  principal: Principal,
  query: ResourceQuery,
): Promise<KeyedRow[]> => searchResources(sql, 'ValueSet', principal.tenantId, query);
