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

/** What `today()`, `now()` and `timeOfDay()` answer for one instant (fhirpath.js's internal values). */
interface Clock {
  readonly today: unknown[];
  readonly instant: unknown[];
  readonly time: unknown[];
}

/** Clocks by ISO instant: a request passes one `now` to every evaluation, parsed once (a few kept). */
const clocks = new Map<string, Clock>();
const clockAt = (now: Date): Clock => {
  const iso = now.toISOString();
  const known = clocks.get(iso);
  if (known) return known;
  const literal = (text: string) =>
    fhirpath.evaluate({}, text, {}, r5model, { resolveInternalTypes: false }) as unknown[];
  const clock = {
    today: literal(`@${iso.slice(0, 10)}`),
    instant: literal(`@${iso}`),
    time: literal(`@T${iso.slice(11, 23)}`),
  };
  if (clocks.size >= 16) clocks.delete(clocks.keys().next().value as string);
  clocks.set(iso, clock);
  return clock;
};

/**
 * The clock of the evaluation running now (evaluations are synchronous, one at a time): its
 * caller's `now`, else the wall clock read once when the expression first asks.
 */
let evaluationNow: Date | undefined;
let evaluationClock: Clock | undefined;
const currentClock = (): Clock => {
  evaluationClock ??= clockAt(evaluationNow ?? new Date());
  return evaluationClock;
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

/** fhirpath.js's functions as casebook runs them: regexes on RE2, the clock of {@link currentClock}. */
const USER_FUNCTIONS = {
  ...RE2_FUNCTIONS,
  today: { fn: () => currentClock().today },
  now: { fn: () => currentClock().instant },
  timeOfDay: { fn: () => currentClock().time },
};

type Compiled = (resource: unknown, env: FhirPathEnv) => unknown;
/**
 * Compiled expressions by base, result mode and text (issue 35): a form evaluates the same
 * expressions on every $populate, $validate and editor page, and parsing is most of the cost of a
 * simple expression. Bounded; the oldest entry goes first.
 */
const compiled = new Map<string, Compiled>();
const COMPILED_MAX = 2000;
const compiledFor = (
  expression: string,
  base: string | undefined,
  resolveInternalTypes: boolean,
): Compiled => {
  const key = `${resolveInternalTypes ? 1 : 0}|${base ?? ''}|${expression}`;
  const known = compiled.get(key);
  if (known) return known;
  const path = base ? { base, expression } : expression;
  const fn = fhirpath.compile(path as never, r5model, {
    resolveInternalTypes,
    userInvocationTable: USER_FUNCTIONS,
  } as never) as unknown as Compiled;
  if (compiled.size >= COMPILED_MAX) compiled.delete(compiled.keys().next().value as string);
  compiled.set(key, fn);
  return fn;
};

const run = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv,
  options: FhirPathOptions,
  resolveInternalTypes: boolean,
): unknown[] => {
  try {
    const result: unknown = runWithinBudget(
      () => {
        evaluationNow = options.now;
        evaluationClock = undefined;
        return compiledFor(expression, options.base, resolveInternalTypes)(resource as object, env);
      },
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

/** What an expression reads, as far as its text says (see {@link expressionReferences}). */
export interface ExpressionReferences {
  /** String literals compared with a `linkId` (`where(linkId = 'weight')`, `linkId in ('a' | 'b')`). */
  readonly linkIds: readonly string[];
  /** Environment variables it names (`%weight` → `weight`). */
  readonly variables: readonly string[];
}

type Token =
  | { readonly kind: 'string'; readonly value: string }
  | { readonly kind: 'identifier'; readonly value: string }
  | { readonly kind: 'variable'; readonly value: string }
  | { readonly kind: 'symbol'; readonly value: string };

const FHIRPATH_ESCAPES: Readonly<Record<string, string>> = { f: '\f', n: '\n', r: '\r', t: '\t' };

/** The value of a FHIRPath string literal's body (`it\'s` → `it's`). */
const unescapeLiteral = (body: string): string =>
  body.replace(/\\(u[0-9a-fA-F]{4}|.)/g, (_, c: string) =>
    c.length === 5 ? String.fromCharCode(Number.parseInt(c.slice(1), 16)) : (FHIRPATH_ESCAPES[c] ?? c),
  );

/** The end of a quoted token starting at `start` (its closing quote's index), or -1 when unterminated. */
const closingQuote = (text: string, start: number, quote: string): number => {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === quote) return i;
  }
  return -1;
};

const isIdentifierStart = (code: number): boolean =>
  (code >= 65 && code <= 90) || (code >= 97 && code <= 122) || code === 95;
const isIdentifierPart = (code: number): boolean => isIdentifierStart(code) || (code >= 48 && code <= 57);
const isSpace = (code: number): boolean => code === 32 || (code >= 9 && code <= 13);

/**
 * FHIRPath's tokens, as far as {@link expressionReferences} needs them. One pass, each character
 * read once: an unterminated string or comment ends the scan.
 */
const tokenize = (text: string): Token[] => {
  const tokens: Token[] = [];
  let i = 0;
  const identifierAt = (from: number): number => {
    let end = from;
    while (end < text.length && isIdentifierPart(text.charCodeAt(end))) end++;
    return end;
  };
  while (i < text.length) {
    const c = text[i]!;
    if (isSpace(text.charCodeAt(i))) i++;
    else if (text.startsWith('//', i)) {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end + 1;
    } else if (text.startsWith('/*', i)) {
      const end = text.indexOf('*/', i + 2);
      if (end < 0) break;
      i = end + 2;
    } else if (c === "'" || c === '`') {
      const end = closingQuote(text, i, c);
      if (end < 0) break;
      tokens.push({
        kind: c === "'" ? 'string' : 'identifier',
        value: unescapeLiteral(text.slice(i + 1, end)),
      });
      i = end + 1;
    } else if (c === '%') {
      const next = text[i + 1];
      if (next === "'" || next === '`') {
        const end = closingQuote(text, i + 1, next);
        if (end < 0) break;
        tokens.push({ kind: 'variable', value: unescapeLiteral(text.slice(i + 2, end)) });
        i = end + 1;
      } else if (next !== undefined && isIdentifierStart(text.charCodeAt(i + 1))) {
        const end = identifierAt(i + 1);
        tokens.push({ kind: 'variable', value: text.slice(i + 1, end) });
        i = end;
      } else {
        tokens.push({ kind: 'symbol', value: c });
        i++;
      }
    } else if (isIdentifierStart(text.charCodeAt(i))) {
      const end = identifierAt(i);
      tokens.push({ kind: 'identifier', value: text.slice(i, end) });
      i = end;
    } else {
      const two = text.slice(i, i + 2);
      const symbol = two === '!=' || two === '!~' || two === '<=' || two === '>=' ? two : c;
      tokens.push({ kind: 'symbol', value: symbol });
      i += symbol.length;
    }
  }
  return tokens;
};

const isSymbol = (token: Token | undefined, ...values: string[]): boolean =>
  token?.kind === 'symbol' && values.includes(token.value);

/** The string literals of an operand starting at `from`: `'a'`, `('a' | 'b')`. */
const literalsFrom = (tokens: readonly Token[], from: number, step: 1 | -1): string[] => {
  const found: string[] = [];
  for (let i = from; i >= 0 && i < tokens.length; i += step) {
    const token = tokens[i]!;
    if (token.kind === 'string') found.push(token.value);
    else if (!isSymbol(token, '(', ')', '|')) break;
  }
  return found;
};

/**
 * The linkIds and variables an expression reads, as far as its text says: the form engine orders
 * calculations and enablement by them (SDC "Dependencies between expressions"). A string literal
 * compared for equality or membership with a path ending in `linkId` is a linkId read
 * (`where(linkId = 'weight')`, `linkId in ('a' | 'b')`); `linkId != 'total'` excludes an item rather
 * than reading it, and `%context.linkId = 'x'` asks which item the expression runs on. `%name` names
 * a variable. Read from FHIRPath's tokens in linear time (a full
 * parse of a client's expression can take longer than its evaluation budget).
 */
export const expressionReferences = (expression: string): ExpressionReferences => {
  const tokens = tokenize(expression);
  const linkIds = new Set<string>();
  const variables = new Set<string>();
  tokens.forEach((token, i) => {
    if (token.kind === 'variable') variables.add(token.value);
    if (token.kind !== 'identifier' || token.value !== 'linkId' || isSymbol(tokens[i + 1], '(')) return;
    let start = i;
    while (start >= 2 && isSymbol(tokens[start - 1], '.') && tokens[start - 2]!.kind !== 'symbol') start -= 2;
    // `%context.linkId = 'x'` asks which item the expression runs on; it reads no answer.
    const first = tokens[start]!;
    if (start < i && first.kind === 'variable' && first.value === 'context') return;
    // `… linkId = 'x'`, `linkId in ('x' | 'y')`: the literals after the operator.
    const after = tokens[i + 1];
    if (isSymbol(after, '=', '~') || (after?.kind === 'identifier' && after.value === 'in'))
      for (const literal of literalsFrom(tokens, i + 2, 1)) linkIds.add(literal);
    // `'x' = linkId`, `('x' | 'y') contains linkId`: the literals before the path ending in linkId.
    const before = tokens[start - 1];
    if (isSymbol(before, '=', '~') || (before?.kind === 'identifier' && before.value === 'contains'))
      for (const literal of literalsFrom(tokens, start - 2, -1)) linkIds.add(literal);
  });
  return { linkIds: [...linkIds], variables: [...variables] };
};
