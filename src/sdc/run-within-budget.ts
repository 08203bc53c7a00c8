/**
 * The Node implementation of {@link RunWithinBudget} (issue 10; src/sdc/budget.ts): each
 * evaluation runs inside a `vm` script with a `timeout`, so V8's watchdog interrupts it wherever it
 * is, even deep inside a regular-expression backtrack. The browser bundle replaces this module by
 * src/sdc/run-within-budget.browser.ts (src/http/app/assets.ts).
 */
import vm from 'node:vm';
import {
  EVALUATION_BUDGET_MS,
  EvaluationBudgetExceeded,
  REQUEST_EVALUATION_BUDGET_MS,
  type RunWithinBudget,
} from './budget.js';

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
export const runWithinBudget: RunWithinBudget = (task, budget) => {
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
      return invoke.runInContext(sandbox, { timeout }) as ReturnType<typeof task>;
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
