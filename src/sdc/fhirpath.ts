/**
 * FHIRPath for the SDC operations (issue 4): one thin wrapper over HL7 fhirpath.js with the FHIR R5
 * model, shared by $populate, $validate and $extract so every expression is evaluated the same way:
 * same model, same error type, and a clock the caller controls (SDC expressions use `today()` and
 * `now()`; a deterministic operation passes its own `now`).
 *
 * Expressions come from clients, so (issue 10) each evaluation runs within a time budget
 * (src/sdc/budget.ts; in the browser, src/sdc/run-within-budget.browser.ts) and the regex functions `matches`, `matchesFull` and `replaceMatches` run
 * on RE2 in linear time (src/sdc/regex.ts) instead of JavaScript's backtracking RegExp.
 */
import fhirpath from 'fhirpath';
import r5model from 'fhirpath/fhir-context/r5';
import { type EvaluationBudget, EvaluationBudgetExceeded } from './budget.js';
import { matchesAnywhere, matchesWhole, type RegexFlags, replaceAllMatches } from './regex.js';
import { runWithinBudget } from './run-within-budget.js';

/** Environment variables of an evaluation, without the `%` (`{ patient: {...} }` → `%patient`). */
export type FhirPathEnv = Record<string, unknown>;

export interface FhirPathOptions {
  /**
   * The model path of `resource` when it is part of a resource, e.g. `QuestionnaireResponse.item`
   * for one response item (typing, and SDC's `weight()`, need it).
   */
  readonly base?: string;
  /** The instant `now()`, `today()` and `timeOfDay()` answer (UTC); the wall clock without it. */
  readonly now?: Date;
  /** The request's evaluation budget, charged with this evaluation (src/sdc/budget.ts). */
  readonly budget?: EvaluationBudget;
}

/** One result of an evaluation with its FHIRPath type. */
export interface TypedValue {
  /** `FHIR.date`, `FHIR.Coding`, `System.Integer`, `System.Quantity`… (empty when unknown). */
  readonly type: string;
  /** The value as plain JSON-like JavaScript (a System.Quantity renders as `5 'mg'`). */
  readonly value: unknown;
  /** fhirpath.js's internal node: pass it on as an environment variable to keep its type. */
  readonly raw: unknown;
}

/** An expression that does not parse or fails while evaluating (unknown function, undefined %variable…). */
export class FhirPathError extends Error {
  constructor(
    readonly expression: string,
    message: string,
  ) {
    super(message);
    this.name = 'FhirPathError';
  }
}

const clockFunctions = (now: Date) => {
  const iso = now.toISOString();
  const literal = (text: string) =>
    fhirpath.evaluate({}, text, {}, r5model, { resolveInternalTypes: false }) as unknown[];
  const today = literal(`@${iso.slice(0, 10)}`);
  const instant = literal(`@${iso}`);
  const time = literal(`@T${iso.slice(11, 23)}`);
  return {
    today: { fn: () => today },
    now: { fn: () => instant },
    timeOfDay: { fn: () => time },
  };
};

/** The single string of a function's input collection; undefined when empty (fhirpath.js's singleton). */
const singletonString = (collection: unknown[]): string | undefined => {
  if (collection.length > 1)
    throw new Error(`expected a single string, not a collection of ${collection.length} items`);
  if (collection.length === 0) return undefined;
  const value: unknown = fhirpath.util.valData(collection[0]);
  if (value === null || value === undefined) return undefined;
  if (typeof value !== 'string') throw new Error(`expected a string, not ${typeof value}`);
  return value;
};

const isEmpty = (value: unknown): boolean =>
  value === null || value === undefined || (Array.isArray(value) && value.length === 0);

/** FHIRPath regex flags (`i`, `m`); fhirpath.js always matches in single-line (dot-all) mode. */
const regexFlags = (flags: unknown): RegexFlags => {
  const text = typeof flags === 'string' ? flags : '';
  if (/[^im]/.test(text)) throw new Error('matches/matchesFull flags must only contain i and/or m');
  return { caseInsensitive: text.includes('i'), multiline: text.includes('m'), dotAll: true };
};

/**
 * fhirpath.js's regex functions, on RE2 (linear time), with fhirpath.js's semantics: an empty
 * input or pattern answers empty; `matches` finds the pattern anywhere, `matchesFull` requires the
 * whole string; `replaceMatches` replaces every match.
 */
const RE2_FUNCTIONS = {
  matches: {
    fn: (input: unknown[], regex: unknown, flags?: unknown) => {
      const value = singletonString(input);
      return value === undefined || isEmpty(regex)
        ? []
        : matchesAnywhere(String(regex), value, regexFlags(flags));
    },
    arity: { 1: ['String'], 2: ['String', 'String'] },
  },
  matchesFull: {
    fn: (input: unknown[], regex: unknown, flags?: unknown) => {
      const value = singletonString(input);
      return value === undefined || isEmpty(regex)
        ? []
        : matchesWhole(String(regex), value, regexFlags(flags));
    },
    arity: { 1: ['String'], 2: ['String', 'String'] },
  },
  replaceMatches: {
    fn: (input: unknown[], regex: unknown, substitution: unknown) => {
      const value = singletonString(input);
      return value === undefined || isEmpty(regex) || isEmpty(substitution)
        ? []
        : replaceAllMatches(String(regex), value, String(substitution));
    },
    arity: { 2: ['String', 'String'] },
  },
};

const run = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv,
  options: FhirPathOptions,
  resolveInternalTypes: boolean,
): unknown[] => {
  try {
    const path = options.base ? { base: options.base, expression } : expression;
    const userInvocationTable = options.now
      ? { ...RE2_FUNCTIONS, ...clockFunctions(options.now) }
      : RE2_FUNCTIONS;
    const result: unknown = runWithinBudget(
      () =>
        fhirpath.evaluate(resource as object, path, env as never, r5model, {
          resolveInternalTypes,
          userInvocationTable,
        } as never),
      options.budget,
      expression,
    );
    if (result instanceof Promise)
      throw new FhirPathError(expression, 'asynchronous FHIRPath functions are not supported');
    return result as unknown[];
  } catch (error) {
    if (error instanceof FhirPathError) throw error;
    if (error instanceof EvaluationBudgetExceeded) throw new FhirPathError(expression, error.message);
    throw new FhirPathError(expression, error instanceof Error ? error.message : String(error));
  }
};

/**
 * Evaluates a FHIRPath expression against `resource` (a FHIR resource, or part of one with
 * `options.base`) using the FHIR R5 model; results are plain JavaScript values. Runs within the
 * evaluation budget of src/sdc/budget.ts (at most EVALUATION_BUDGET_MS, 200 ms, per expression).
 * @throws {FhirPathError} when the expression does not parse, fails (e.g. an undefined %variable),
 *   uses a regex RE2 cannot compile, or runs out of its time budget.
 */
export const evaluateFhirPath = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv = {},
  options: FhirPathOptions = {},
): unknown[] => run(resource, expression, env, options, true);

/**
 * Like {@link evaluateFhirPath}, with each result's FHIRPath type and its internal node (to bind it
 * as a variable of a later evaluation without losing its type, as fhirpath.js recommends).
 * @throws {FhirPathError} as evaluateFhirPath.
 */
export const evaluateFhirPathTyped = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv = {},
  options: FhirPathOptions = {},
): TypedValue[] => {
  const raw = run(resource, expression, env, options, false).filter(
    // Metadata-only primitives (an `_birthDate` with no value) are not values.
    (node) => !(node && typeof node === 'object' && 'data' in node && node.data == null && '_data' in node),
  );
  const types = fhirpath.types(raw as never) as string[];
  const values = fhirpath.resolveInternalTypes(raw as never) as unknown[];
  return raw.map((node, i) => ({ type: types[i] ?? '', value: values[i], raw: node }));
};
