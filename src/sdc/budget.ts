/**
 * Time budgets for evaluating what a client wrote (issue 10 "no single request can hold the event
 * loop for more than 1 s"): FHIRPath expressions and regular expressions of Questionnaires and
 * responses run synchronously. Each evaluation gets at most {@link EVALUATION_BUDGET_MS}; all
 * evaluations of one request together at most {@link REQUEST_EVALUATION_BUDGET_MS}: the request's
 * {@link EvaluationBudget}, which the HTTP layer creates (`ctx.state.evaluationBudget`) and passes
 * to the SDC functions (`budget` of their options), and they to every evaluation.
 *
 * This module is the platform-neutral part (the form engine runs in Node and in the browser); how
 * an evaluation is bounded is platform code: src/sdc/run-within-budget.ts interrupts it with a `vm`
 * timeout in Node, src/sdc/run-within-budget.browser.ts runs it in the editor's Web Worker, which
 * the page terminates when it overruns (src/http/app/browser/engine-client.ts).
 *
 * The budget is passed, not carried in an AsyncLocalStorage: on Node 20 one AsyncLocalStorage in
 * use puts promise hooks on every promise of the process, a cost every request paid (4–12 %
 * of audited reads per second) for what a few SDC requests need.
 */

/** The longest one evaluation (one FHIRPath expression, one regex match) may run, in milliseconds. */
export const EVALUATION_BUDGET_MS = 200;
/** The longest all evaluations of one request may run together, in milliseconds. */
export const REQUEST_EVALUATION_BUDGET_MS = 750;

/** An evaluation that ran out of time: its own budget, or what was left of the request's. */
export class EvaluationBudgetExceeded extends Error {
  constructor(
    /** The budget that ran out, in milliseconds. */
    readonly budgetMs: number,
    readonly scope: 'evaluation' | 'request',
  ) {
    super(
      scope === 'evaluation'
        ? `the evaluation took longer than its budget of ${budgetMs} ms and was stopped`
        : `the request's evaluation budget of ${budgetMs} ms is used up; not evaluated`,
    );
    this.name = 'EvaluationBudgetExceeded';
  }
}

/** What is left of one request's evaluation budget: shared by every evaluation the request makes. */
export class EvaluationBudget {
  /** @param remainingMs milliseconds left (default {@link REQUEST_EVALUATION_BUDGET_MS}). */
  constructor(public remainingMs: number = REQUEST_EVALUATION_BUDGET_MS) {}
}

/**
 * Runs one synchronous evaluation within its budget: the signature both platforms implement
 * (src/sdc/run-within-budget.ts, src/sdc/run-within-budget.browser.ts).
 * @param task the evaluation.
 * @param budget the request's budget; without one only the bound of one evaluation applies.
 * @param label what is evaluated (a FHIRPath expression, a regex), for the browser's watchdog.
 * @returns what `task` returns.
 * @throws {EvaluationBudgetExceeded} when `task` ran out of time or the request's budget was
 *   already used up (it is not started); anything `task` throws.
 */
export type RunWithinBudget = <T>(task: () => T, budget?: EvaluationBudget, label?: string) => T;
