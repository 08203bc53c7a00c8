/**
 * Time budgets for evaluating what a client wrote (issue 10 "no single request can hold the event
 * loop for more than 1 s"): FHIRPath expressions and regular expressions of Questionnaires and
 * responses run synchronously, so each evaluation runs inside a `vm` script with a `timeout`. V8's
 * watchdog then interrupts it wherever it is, even deep inside a regular-expression backtrack.
 * Each evaluation gets at most {@link EVALUATION_BUDGET_MS}; all evaluations of one request
 * together at most {@link REQUEST_EVALUATION_BUDGET_MS}: the request's {@link EvaluationBudget},
 * which the HTTP layer creates (`ctx.state.evaluationBudget`) and passes to the SDC functions
 * (`budget` of their options), and they to every evaluation.
 *
 * The budget is passed, not carried in an AsyncLocalStorage: on Node 20 one AsyncLocalStorage in
 * use puts promise hooks on every promise of the process, a cost every request paid (4–12 %
 * of audited reads per second, bench/README.md) for what a few SDC requests need.
 */
import vm from 'node:vm';

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

// One context for every evaluation: creating a context costs milliseconds, entering one ~0.1 ms.
const sandbox = vm.createContext({ task: undefined as (() => unknown) | undefined });
const invoke = new vm.Script('task()', { filename: 'casebook-evaluation-budget' });
let running = false;

/**
 * Runs the synchronous `task` for at most {@link EVALUATION_BUDGET_MS} (less when the request's
 * budget has less left), and charges the time to the request's budget. A task interrupted while
 * the process got less than half the time as CPU (a busy machine) is run once more, so at worst
 * one evaluation takes twice its budget.
 * @param budget the request's budget; without one only the bound of one evaluation applies.
 * @returns what `task` returns.
 * @throws {EvaluationBudgetExceeded} when `task` ran out of time (it is interrupted) or the
 *   request's budget was already used up (it is not started); anything `task` throws.
 */
export const runWithinBudget = <T>(task: () => T, budget?: EvaluationBudget): T => {
  // A task that evaluates more (a FHIRPath function calling a regex) is already timed.
  if (running) return task();
  for (let attempt = 1; ; attempt++) {
    if (budget && budget.remainingMs <= 0)
      throw new EvaluationBudgetExceeded(REQUEST_EVALUATION_BUDGET_MS, 'request');
    const timeout = Math.max(1, Math.ceil(Math.min(EVALUATION_BUDGET_MS, budget?.remainingMs ?? Infinity)));
    const started = performance.now();
    const cpu = process.cpuUsage();
    running = true;
    sandbox.task = task;
    try {
      return invoke.runInContext(sandbox, { timeout }) as T;
    } catch (error) {
      if ((error as { code?: unknown })?.code !== 'ERR_SCRIPT_EXECUTION_TIMEOUT') throw error;
      // The watchdog counts wall time. When the process got less than half of it as CPU time, the
      // machine was busy rather than the task: run it once more instead of failing it.
      const used = process.cpuUsage(cpu);
      if (attempt === 1 && (used.user + used.system) / 1000 < timeout / 2) continue;
      throw timeout < EVALUATION_BUDGET_MS
        ? new EvaluationBudgetExceeded(REQUEST_EVALUATION_BUDGET_MS, 'request')
        : new EvaluationBudgetExceeded(EVALUATION_BUDGET_MS, 'evaluation');
    } finally {
      running = false;
      sandbox.task = undefined;
      if (budget) budget.remainingMs -= performance.now() - started;
    }
  }
};
