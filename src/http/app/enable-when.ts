/**
 * enableWhen in the report editor (issue 5): one evaluator, bundled for the browser
 * (src/http/app/browser/editor.ts, so items show and hide live) and run on the server over the
 * submitted form (so answers of disabled items are ignored).
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
 * Returns the map linkId → enabled for every linkId of `rules`. An item is enabled when its parent
 * is and its conditions hold (`all` or `any`); the answers of a disabled question count as absent.
 * Conditions on unknown questions are false (except `exists = false`). Comparisons: `=`/`!=` on
 * equal values, `<`…`>=` on numbers and ISO date strings.
 */
export const evaluateEnableWhen = (
  rules: Readonly<Record<string, Rule>>,
  values: Values,
): Record<string, boolean> => {
  const state = new Map<string, boolean>();
  const visiting = new Set<string>();
  const ruleOf = (id: string): Rule | undefined => (Object.hasOwn(rules, id) ? rules[id] : undefined);
  const enabled = (id: string): boolean => {
    const known = state.get(id);
    if (known !== undefined) return known;
    const rule = ruleOf(id);
    if (!rule) return true;
    if (visiting.has(id)) return true;
    visiting.add(id);
    let ok = rule.parent === null || enabled(rule.parent);
    if (ok && rule.conditions.length > 0) {
      const results = rule.conditions.map(holds);
      ok = rule.behavior === 'any' ? results.some(Boolean) : results.every(Boolean);
    }
    visiting.delete(id);
    state.set(id, ok);
    return ok;
  };
  const answersOf = (id: string): readonly (string | number | boolean)[] =>
    ruleOf(id) && !enabled(id) ? [] : Object.hasOwn(values, id) ? (values[id] ?? []) : [];
  const compare = (a: unknown, b: unknown): number => {
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    if (typeof a === 'string' && typeof b === 'string') return a < b ? -1 : a > b ? 1 : 0;
    return Number.NaN;
  };
  function holds(c: Condition): boolean {
    const answers = answersOf(c.question);
    if (c.operator === 'exists') return answers.length > 0 === (c.answer === true);
    if (c.operator === '!=') return answers.length > 0 && answers.every((a) => a !== c.answer);
    return answers.some((a) => {
      if (c.operator === '=') return a === c.answer;
      const d = compare(a, c.answer);
      if (Number.isNaN(d)) return false;
      if (c.operator === '>') return d > 0;
      if (c.operator === '<') return d < 0;
      if (c.operator === '>=') return d >= 0;
      if (c.operator === '<=') return d <= 0;
      return false;
    });
  }
  const out: Record<string, boolean> = {};
  for (const id of Object.keys(rules)) out[id] = enabled(id);
  return out;
};

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
  const rules: Record<string, Rule> = {};
  const walk = (list: readonly RuleItem[] | undefined, parent: string | null) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      const conditions = (Array.isArray(item.enableWhen) ? item.enableWhen : []).flatMap((w): Condition[] => {
        if (typeof w.question !== 'string' || typeof w.operator !== 'string') return [];
        const answer = normaliseValue(w, 'answer');
        return answer === undefined ? [] : [{ question: w.question, operator: w.operator, answer }];
      });
      rules[item.linkId] = {
        parent,
        behavior: item.enableBehavior === 'any' ? 'any' : 'all',
        conditions,
      };
      walk(item.item, item.linkId);
    }
  };
  walk(items, null);
  return rules;
};
