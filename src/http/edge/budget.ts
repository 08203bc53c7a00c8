/**
 * The evaluation budget of a request (issue 10; src/sdc/budget.ts): every FHIRPath expression and
 * regex one request makes casebook evaluate — the SDC operations, the report editor — shares
 * REQUEST_EVALUATION_BUDGET_MS (750 ms) in all. Routes pass it to the SDC functions.
 */
import type { Context } from 'koa';
import { EvaluationBudget, REQUEST_EVALUATION_BUDGET_MS } from '../../sdc/budget.js';

/** The request's budget, made on first use and kept in `ctx.state` for the rest of the request. */
export const evaluationBudget = (ctx: Context): EvaluationBudget => {
  const existing = ctx.state.evaluationBudget as EvaluationBudget | undefined;
  if (existing) return existing;
  const budget = new EvaluationBudget(REQUEST_EVALUATION_BUDGET_MS);
  ctx.state.evaluationBudget = budget;
  return budget;
};
