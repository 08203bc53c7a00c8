/**
 * The `x-fhir-query` runner of a request (issue 35; docs/interface.md §4.4 "Queries"): SDC
 * population's searches run in-process against casebook's own search (src/queries/sdc-query.ts)
 * with the caller's principal — its tenant and scopes — relative to casebook's FHIR base; what a
 * query showed is noted for the request's AuditEvent like any search.
 */
import type { Context } from 'koa';
import type { Sql } from '../../db/sql.js';
import type { Principal } from '../../fhir/access.js';
import { searchForQuery } from '../../queries/sdc-query.js';
import { type FhirQueryRunner, QueryBudget, type QueryRun } from '../../sdc/fhir-query.js';
import { noteAudit } from '../audit.js';

/**
 * A {@link FhirQueryRunner} for one request.
 * @param base casebook's FHIR base URL (fullUrls of the results).
 */
export const queryRunner =
  (ctx: Context, sql: Sql, principal: Principal, base: string): FhirQueryRunner =>
  async (type, parameters, maxCount) => {
    const { bundle, rows } = await searchForQuery(sql, principal, base, type, parameters, maxCount);
    if (rows.length > 0)
      noteAudit(ctx, {
        entities: rows.map((row) => ({
          reference: `${row.resourceType}/${row.id}`,
          patientId: row.patientId,
        })),
      });
    return bundle;
  };

/** The request's query budget, made on first use and kept in `ctx.state`. */
export const queryBudget = (ctx: Context): QueryBudget => {
  const existing = ctx.state.queryBudget as QueryBudget | undefined;
  if (existing) return existing;
  const budget = new QueryBudget();
  ctx.state.queryBudget = budget;
  return budget;
};

/**
 * Everything a request needs to run x-fhir-query (src/sdc/fhir-query.ts `runFhirQuery`): the
 * runner under `principal`, the request's query budget, and casebook's own FHIR and SDC bases.
 */
export const queryRun = (
  ctx: Context,
  sql: Sql,
  principal: Principal,
  config: { readonly fhirUrl: string; readonly sdcUrl: string },
): QueryRun => ({
  query: queryRunner(ctx, sql, principal, config.fhirUrl),
  budget: queryBudget(ctx),
  bases: [config.fhirUrl, config.sdcUrl],
});
