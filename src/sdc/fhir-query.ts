/**
 * `application/x-fhir-query` expressions of SDC population (issue 35; SDC IG "Expression-based
 * population": `variable`, `itemPopulationContext`, `sourceQueries`): a FHIR search, relative to
 * the server's FHIR base, with `{{FHIRPath}}` embedded (`Observation?patient={{%patient.id}}`).
 *
 * The pure part lives here: substituting the embedded expressions, splitting the query into a
 * resource type and parameters, and the request's query budget. Running the search is the
 * caller's {@link FhirQueryRunner} (the form backend runs it in-process against casebook's own
 * search, src/queries/sdc-query.ts), so a query sees exactly what the caller's scopes let it see.
 */
import type { Json } from './types.js';

export const X_FHIR_QUERY = 'application/x-fhir-query';

/** The most matches one query returns (its `_count` is lowered to this): a bound on every query. */
export const QUERY_MAX_COUNT = 50;
/** The most queries one request runs. */
export const MAX_QUERIES_PER_REQUEST = 60;
/**
 * The time all queries of one request may take together, in milliseconds: a budget of its own,
 * apart from FHIRPath's (src/sdc/budget.ts), so a form of about twenty queries (the MBS 715 health
 * check) populates in one request without taking FHIRPath time from its items.
 */
export const QUERY_BUDGET_MS = 5000;

/** Why a query could not be run: its issue code and a message naming the problem. */
export class FhirQueryError extends Error {
  constructor(
    message: string,
    readonly code: 'not-supported' | 'invalid' | 'forbidden' | 'processing' | 'too-costly',
  ) {
    super(message);
    this.name = 'FhirQueryError';
  }
}

/**
 * Runs one search: `type` and its parameters (in order, repeats allowed), at most `maxCount`
 * matches. @returns a `searchset` Bundle. @throws {FhirQueryError} when the search can't be run
 * (unsupported type or parameter, no right to search the type).
 */
export type FhirQueryRunner = (
  type: string,
  parameters: [string, string][],
  maxCount: number,
) => Promise<Json>;

/** What is left of one request's query budget (shared by every query of the request). */
export class QueryBudget {
  constructor(
    public remainingMs: number = QUERY_BUDGET_MS,
    public remainingQueries: number = MAX_QUERIES_PER_REQUEST,
  ) {}
}

/**
 * Replaces each `{{expression}}` by the first result of `evaluate(expression)`, URI-encoded.
 * @throws {FhirQueryError} `invalid` for an unterminated `{{`, or an expression with no result
 *   (a query built on nothing would search for everything).
 */
export const expandQuery = (template: string, evaluate: (expression: string) => unknown[]): string => {
  let out = '';
  let at = 0;
  for (;;) {
    const open = template.indexOf('{{', at);
    if (open < 0) return out + template.slice(at);
    const close = template.indexOf('}}', open + 2);
    if (close < 0) throw new FhirQueryError(`'${template}': {{ without }}`, 'invalid');
    const expression = template.slice(open + 2, close).trim();
    const [first] = evaluate(expression);
    if (first === undefined || first === null || typeof first === 'object')
      throw new FhirQueryError(
        `'${template}': {{${expression}}} has no ${first === undefined ? 'value' : 'primitive value'}, so the query is not run`,
        'invalid',
      );
    out += template.slice(at, open) + encodeURIComponent(String(first));
    at = close + 2;
  }
};

/**
 * Splits an expanded query into its resource type and parameters. The query is relative to the
 * FHIR base (`Observation?code=…`), or absolute under one of `bases` (casebook's own).
 * @throws {FhirQueryError} `not-supported` for another server's URL, an operation or a read by id;
 *   `invalid` for a query that names no resource type.
 */
export const parseQuery = (
  query: string,
  bases: readonly string[],
): { type: string; parameters: [string, string][] } => {
  let relative = query.trim();
  for (const base of bases)
    if (relative.startsWith(`${base}/`)) {
      relative = relative.slice(base.length + 1);
      break;
    }
  if (/^[a-z][a-z0-9+.-]*:/i.test(relative))
    throw new FhirQueryError(
      `'${query}' addresses another server: only casebook's own FHIR base is queried`,
      'not-supported',
    );
  const question = relative.indexOf('?');
  const path = (question < 0 ? relative : relative.slice(0, question)).replace(/^\//, '');
  if (!/^[A-Z][A-Za-z]+$/.test(path))
    throw new FhirQueryError(
      `'${query}': only a search of one resource type (Type?parameters) is supported`,
      path === '' ? 'invalid' : 'not-supported',
    );
  const search = question < 0 ? '' : relative.slice(question + 1);
  return { type: path, parameters: [...new URLSearchParams(search)] };
};

/** What {@link runFhirQuery} needs: the runner, the request's budget and casebook's own bases. */
export interface QueryRun {
  readonly query: FhirQueryRunner;
  readonly budget: QueryBudget;
  readonly bases: readonly string[];
}

/**
 * Runs one x-fhir-query (issue 35; docs/interface.md §4.4 "Queries"): its `{{…}}` expanded by
 * `evaluate`, parsed ({@link parseQuery}), then searched by the runner with at most
 * {@link QUERY_MAX_COUNT} matches, charged to the request's {@link QueryBudget} (one query, and the
 * milliseconds it took). The one way $populate's variables, itemPopulationContext, sourceQueries
 * and the answerExpression/candidateExpression of src/sdc/answer-expression.ts run a query.
 * @returns the `searchset` Bundle.
 * @throws {FhirQueryError} `too-costly` when the budget is used up (nothing is run), else what
 *   expansion, parsing or the runner throws; a FHIRPath error of an embedded expression as it is.
 */
export const runFhirQuery = async (
  run: QueryRun,
  template: string,
  evaluate: (expression: string) => unknown[],
): Promise<Json> => {
  const { budget } = run;
  if (budget.remainingMs <= 0 || budget.remainingQueries <= 0)
    throw new FhirQueryError(
      `the request's query budget is used up (at most ${budget.remainingQueries <= 0 ? `${MAX_QUERIES_PER_REQUEST} queries` : `${QUERY_BUDGET_MS} ms of queries`}); '${template}' is not run`,
      'too-costly',
    );
  const expanded = expandQuery(template, evaluate);
  const { type, parameters } = parseQuery(expanded, run.bases);
  budget.remainingQueries -= 1;
  const started = performance.now();
  try {
    return await run.query(type, parameters, QUERY_MAX_COUNT);
  } finally {
    budget.remainingMs -= performance.now() - started;
  }
};

/** The resources a `searchset` Bundle matched (not those `_include` added), in order. */
export const matchesOf = (bundle: Json | undefined): Json[] =>
  (Array.isArray(bundle?.entry) ? (bundle.entry as unknown[]) : []).flatMap((e) => {
    if (e === null || typeof e !== 'object') return [];
    const entry = e as { resource?: unknown; search?: { mode?: unknown } };
    return entry.resource !== null &&
      typeof entry.resource === 'object' &&
      !Array.isArray(entry.resource) &&
      entry.search?.mode !== 'include'
      ? [entry.resource as Json]
      : [];
  });
