/**
 * enableWhen in the report editor (issue 5): one evaluator, shipped to the browser as source (so
 * items show and hide live) and run on the server over the submitted form (so answers of disabled
 * items are ignored). Plain ES2019 on purpose: the same text runs in both places.
 */

/** One enableWhen condition, its answer normalised (coding → code, numbers, booleans, strings). */
export interface Condition {
  readonly question: string;
  readonly operator: string;
  readonly answer: string | number | boolean;
}

/** The enableWhen rules of one item and its parent item (a disabled parent disables its children). */
export interface Rule {
  readonly parent: string | null;
  readonly behavior: 'all' | 'any';
  readonly conditions: readonly Condition[];
}

/** Normalised answers per linkId (coding → code). */
export type Values = Readonly<Record<string, readonly (string | number | boolean)[]>>;

/**
 * Source of `cbEnabled(rules, values)`: returns the map linkId → enabled for every linkId of
 * `rules`. An item is enabled when its parent is and its conditions hold (`all` or `any`); the
 * answers of a disabled question count as absent. Conditions on unknown questions are false
 * (except `exists = false`). Comparisons: `=`/`!=` on equal values, `<`…`>=` on numbers and
 * ISO date strings.
 */
export const ENABLE_WHEN_SOURCE = `function cbEnabled(rules, values) {
  // linkIds are keys: own properties only, and no prototype, so valueOf or __proto__ is a linkId.
  function own(o, k) { return Object.prototype.hasOwnProperty.call(o, k); }
  var state = Object.create(null);
  var visiting = Object.create(null);
  function enabled(id) {
    if (own(state, id)) return state[id];
    var rule = own(rules, id) ? rules[id] : undefined;
    if (!rule) return true;
    if (visiting[id]) return true;
    visiting[id] = true;
    var ok = rule.parent === null || enabled(rule.parent);
    if (ok && rule.conditions.length > 0) {
      var results = rule.conditions.map(function (c) { return holds(c); });
      ok = rule.behavior === 'any'
        ? results.some(function (r) { return r; })
        : results.every(function (r) { return r; });
    }
    visiting[id] = false;
    state[id] = ok;
    return ok;
  }
  function answersOf(id) {
    if (own(rules, id) && !enabled(id)) return [];
    return own(values, id) ? values[id] : [];
  }
  function compare(a, b) {
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    if (typeof a === 'string' && typeof b === 'string') return a < b ? -1 : a > b ? 1 : 0;
    return NaN;
  }
  function holds(c) {
    var answers = answersOf(c.question);
    if (c.operator === 'exists') return (answers.length > 0) === (c.answer === true);
    if (c.operator === '!=') return answers.length > 0 && answers.every(function (a) { return a !== c.answer; });
    return answers.some(function (a) {
      if (c.operator === '=') return a === c.answer;
      var d = compare(a, c.answer);
      if (d !== d) return false;
      if (c.operator === '>') return d > 0;
      if (c.operator === '<') return d < 0;
      if (c.operator === '>=') return d >= 0;
      if (c.operator === '<=') return d <= 0;
      return false;
    });
  }
  var out = Object.create(null);
  Object.keys(rules).forEach(function (id) { out[id] = enabled(id); });
  return out;
}`;

// Our own constant source, shared with the browser: one evaluator for both sides.
const evaluator = new Function(`${ENABLE_WHEN_SOURCE}\nreturn cbEnabled;`)() as (
  rules: Readonly<Record<string, Rule>>,
  values: Values,
) => Record<string, boolean>;

/**
 * Evaluates the rules over normalised answers: linkId → enabled (see {@link ENABLE_WHEN_SOURCE}),
 * an object without prototype (read it with `Object.hasOwn` or `=== false`).
 */
export const evaluateEnableWhen = (
  rules: Readonly<Record<string, Rule>>,
  values: Values,
): Record<string, boolean> => evaluator(rules, values);

/** Normalises an enableWhen `answer[x]` (or answer `value[x]`) to what the evaluator compares. */
export const normaliseValue = (
  element: Record<string, unknown>,
  prefix: 'answer' | 'value',
): string | number | boolean | undefined => {
  for (const [key, value] of Object.entries(element)) {
    if (!key.startsWith(prefix) || key.length === prefix.length) continue;
    if (typeof value === 'boolean' || typeof value === 'number' || typeof value === 'string') return value;
    if (value && typeof value === 'object') {
      const coding = value as { code?: unknown; value?: unknown; reference?: unknown };
      if (typeof coding.code === 'string') return coding.code;
      if (typeof coding.value === 'number') return coding.value;
      if (typeof coding.reference === 'string') return coding.reference;
    }
  }
  return undefined;
};

interface RuleItem {
  readonly linkId: string;
  readonly enableWhen?: readonly Record<string, unknown>[];
  readonly enableBehavior?: string;
  readonly item?: readonly RuleItem[];
}

/** The rules of every item of a Questionnaire (items without enableWhen get rules only for their parent). */
export const rulesOf = (items: readonly RuleItem[] | undefined): Record<string, Rule> => {
  // A Map, then an object of own properties: a linkId such as `__proto__` is a key, not a prototype.
  const rules = new Map<string, Rule>();
  const walk = (list: readonly RuleItem[] | undefined, parent: string | null) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      const conditions = (Array.isArray(item.enableWhen) ? item.enableWhen : []).flatMap((w): Condition[] => {
        if (typeof w.question !== 'string' || typeof w.operator !== 'string') return [];
        const answer = normaliseValue(w, 'answer');
        return answer === undefined ? [] : [{ question: w.question, operator: w.operator, answer }];
      });
      rules.set(item.linkId, {
        parent,
        behavior: item.enableBehavior === 'any' ? 'any' : 'all',
        conditions,
      });
      walk(item.item, item.linkId);
    }
  };
  walk(items, null);
  return Object.fromEntries(rules);
};
