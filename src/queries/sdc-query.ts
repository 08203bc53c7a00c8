/**
 * The searches of SDC `x-fhir-query` expressions, run in-process (issue 35; docs/interface.md §4.4
 * "Queries"): the very search the data server's `GET {fhir_base_url}/{type}?…` runs
 * ({@link search}, through src/queries/visibility.ts), with the caller's principal — its tenant and
 * its scopes, so a patient-context session finds its own patient's resources only.
 */
import type { Sql } from '../db/sql.js';
import { DomainError } from '../domain/decider.js';
import { isResourceType } from '../domain/fhir/resource.js';
import type { Principal } from '../fhir/access.js';
import { definitionOf } from '../fhir/resources.js';
import { SEARCH_PARAMETERS } from '../fhir/search.js';
import { FhirQueryError } from '../sdc/fhir-query.js';
import type { Json } from '../sdc/types.js';
import { type SearchParams, search } from './fhir.js';
import type { ResourceRow } from './visibility.js';

/** Parameters a query may not set: paging belongs to the server, and a total would read every match. */
const OVERRIDDEN = new Set(['_count', '_total', '_cursor']);

/**
 * Runs one search for `principal` and answers it as a `searchset` Bundle (fullUrls under `base`):
 * at most `maxCount` matches (a smaller `_count` of the query is kept), no total, the first page.
 * @returns the Bundle and the rows it shows (for the audit trail).
 * @throws {FhirQueryError} `not-supported` for a type or parameter casebook does not search,
 *   `invalid` for a malformed value, `forbidden` when the principal may not search the type.
 */
export const searchForQuery = async (
  sql: Sql,
  principal: Principal,
  base: string,
  type: string,
  parameters: readonly [string, string][],
  maxCount: number,
): Promise<{ bundle: Json; rows: ResourceRow[] }> => {
  if (!isResourceType(type) || !Object.hasOwn(SEARCH_PARAMETERS, type))
    throw new FhirQueryError(`casebook holds no ${type} resources to search`, 'not-supported');
  const params: SearchParams = {};
  let count = maxCount;
  for (const [name, value] of parameters) {
    if (name === '_count') {
      const asked = /^\d{1,9}$/.test(value) ? Number(value) : Number.NaN;
      if (Number.isNaN(asked)) throw new FhirQueryError(`_count=${value} is not a count`, 'invalid');
      count = Math.min(asked, maxCount);
      continue;
    }
    if (OVERRIDDEN.has(name)) continue;
    const held = params[name];
    params[name] = held === undefined ? value : [...(Array.isArray(held) ? held : [held]), value];
  }
  params._count = String(count);
  params._total = 'none';
  try {
    const result = await search(sql, principal, definitionOf(type), params);
    const entry = (row: ResourceRow, mode: 'match' | 'include') => ({
      fullUrl: `${base}/${row.resourceType}/${row.id}`,
      resource: row.resource,
      search: { mode },
    });
    const entries = [
      ...result.matches.map((row) => entry(row, 'match')),
      ...result.included.map((row) => entry(row, 'include')),
    ];
    return {
      bundle: {
        resourceType: 'Bundle',
        type: 'searchset',
        ...(entries.length > 0 ? { entry: entries } : {}),
      },
      rows: [...result.matches, ...result.included],
    };
  } catch (error) {
    if (error instanceof DomainError)
      throw new FhirQueryError(
        error.message,
        error.kind === 'forbidden' || error.kind === 'unauthorized'
          ? 'forbidden'
          : error.fhir.issueCode === 'not-supported' || error.code.startsWith('Unsupported')
            ? 'not-supported'
            : 'invalid',
      );
    throw error;
  }
};
