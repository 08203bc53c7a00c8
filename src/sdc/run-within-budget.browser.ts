/**
 * The browser implementation of {@link RunWithinBudget} (issue 32 "FHIRPath stays inside its
 * evaluation budget in the browser too"), bundled in place of src/sdc/run-within-budget.ts
 * (src/http/app/assets.ts). A browser cannot interrupt synchronous code, so the form engine runs
 * in a Web Worker (src/http/app/browser/engine-worker.ts) and the page is the watchdog: before
 * each evaluation the worker tells the page what it starts ({@link observeEvaluations}), and the
 * page terminates a worker that stays on one evaluation past its budget and starts a new one with
 * that evaluation refused ({@link refuseEvaluations}). Inside the worker an evaluation that
 * finished over its budget (or over what was left of the run's) is refused as on the server: its
 * result is dropped and it throws {@link EvaluationBudgetExceeded}.
 */
import {
  EVALUATION_BUDGET_MS,
  EvaluationBudgetExceeded,
  REQUEST_EVALUATION_BUDGET_MS,
  type RunWithinBudget,
} from './budget.js';

/** What an evaluation observer hears: the label of an evaluation starting, or undefined when it ended. */
export type EvaluationObserver = (label: string | undefined) => void;

const refused = new Set<string>();
let observer: EvaluationObserver | undefined;
let running = false;

/** Labels (FHIRPath expressions, regexes) that overran in an earlier worker: refused from now on. */
export const refuseEvaluations = (labels: Iterable<string>): void => {
  for (const label of labels) refused.add(label);
};

/** Tells `observe` when each evaluation starts and ends (the worker forwards it to the page). */
export const observeEvaluations = (observe: EvaluationObserver | undefined): void => {
  observer = observe;
};

/**
 * Runs `task`, charging its time to `budget`; see the module comment for how an overrun is
 * stopped.
 * @throws {EvaluationBudgetExceeded} when the budget is used up (not started), the label was
 *   refused, or the task finished over its budget; anything `task` throws.
 */
export const runWithinBudget: RunWithinBudget = (task, budget, label) => {
  if (running) return task();
  if (budget && budget.remainingMs <= 0)
    throw new EvaluationBudgetExceeded(REQUEST_EVALUATION_BUDGET_MS, 'request');
  if (label !== undefined && refused.has(label))
    throw new EvaluationBudgetExceeded(EVALUATION_BUDGET_MS, 'evaluation');
  const limit = Math.min(EVALUATION_BUDGET_MS, budget?.remainingMs ?? Infinity);
  observer?.(label ?? '');
  const started = performance.now();
  running = true;
  let elapsed = 0;
  try {
    const result = task();
    elapsed = performance.now() - started;
    if (elapsed > limit) {
      if (limit < EVALUATION_BUDGET_MS)
        throw new EvaluationBudgetExceeded(REQUEST_EVALUATION_BUDGET_MS, 'request');
      if (label !== undefined) refused.add(label);
      throw new EvaluationBudgetExceeded(EVALUATION_BUDGET_MS, 'evaluation');
    }
    return result;
  } finally {
    running = false;
    observer?.(undefined);
    if (budget) budget.remainingMs -= elapsed || performance.now() - started;
  }
};
