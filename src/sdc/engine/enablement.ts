/**
 * enableWhen, enableBehavior and SDC enableWhenExpression (issue 32; R5 Questionnaire.item.enableWhen):
 * the one evaluator of the editor (server and browser) and $validate.
 *
 * - An item is enabled when its parent is (a disabled group disables its children, a disabled
 *   question its answers' children) and its conditions hold: all of them, or any with
 *   `enableBehavior` `any`; and its enableWhenExpression, when it has one, is exactly `true`.
 * - The answers of a disabled question count as absent ("If enableWhen logic depends on an item
 *   that is disabled, the logic proceeds as though the item is not valued").
 * - Repeats: a condition reads the occurrences of its question in the same instance of their
 *   nearest common ancestor (R5: the nearest occurrence on the ancestor axis): inside one Nodule a
 *   question depends on that Nodule's answers; a question outside the repeating group reads all
 *   its instances.
 * - Operators as R5 defines them: `=`, `>`… hold when at least one answer compares so; `!=` when
 *   no answer equals (also when unanswered); `exists` compares answered-ness with the boolean.
 * - A cycle (definition.ts) disables the items whose enablement is on it, reported once as a
 *   warning. An enableWhenExpression that fails or runs out of budget is reported once as a
 *   warning and the item counts as enabled.
 * Items are decided dependencies first (definition.ts `evaluationOrder`, driven by index.ts with
 * the calculations in between); each decision is final, so the result does not depend on the
 * response's order.
 */
import type { FhirPathError } from '../fhirpath.js';
import {
  type EngineContext,
  evaluateItemExpression,
  invalidateView,
  occurrencesOf,
  report,
} from './context.js';
import type { ItemDefinition } from './definition.js';
import { arrayOf, isObject } from './extensions.js';
import { keyAt, type ResponseNode, type Scope } from './tree.js';
import { answerValues, compareValues, valueKeys } from './values.js';

/** Decides whether `node` is enabled (its dependencies are decided: evaluation order). */
export const decideEnablement = (ctx: EngineContext, node: ResponseNode): boolean => {
  const enabled = enabledIn(ctx, node.def, node.scope, node);
  ctx.enabled.set(node, enabled);
  if (!enabled && hasAnswers(node)) invalidateView(ctx);
  return enabled;
};

/** Is `node` enabled? (Decided by {@link evaluateEnablement}; a node added later is decided now.) */
export const isEnabled = (ctx: EngineContext, node: ResponseNode): boolean => {
  const known = ctx.enabled.get(node);
  if (known !== undefined) return known;
  const enabled = enabledIn(ctx, node.def, node.scope, node);
  ctx.enabled.set(node, enabled);
  return enabled;
};

/** Is item `def` enabled in `scope` — for an instance the response does not have? */
export const enabledAt = (ctx: EngineContext, def: ItemDefinition, scope: Scope): boolean =>
  enabledIn(ctx, def, scope, undefined);

/** Does `node` hold an answer, itself or beneath it? */
export const hasAnswers = (node: ResponseNode): boolean =>
  answerValues(node.answers).length > 0 || node.scopes.some((s) => s.nodes.some(hasAnswers));

/** Reports each cycle of the form once (definition.ts decides what they mean). */
export const reportCycles = (ctx: EngineContext): void => {
  for (const cycle of ctx.form.cycles) {
    const names = cycle.items.map((i) => i.label).join(', ');
    const effects = [
      cycle.disabled.length ? `${cycle.disabled.map((i) => i.label).join(', ')} treated as disabled` : '',
      cycle.uncalculated.length ? `${cycle.uncalculated.map((i) => i.label).join(', ')} not calculated` : '',
    ].filter(Boolean);
    report(
      ctx,
      {
        code: 'business-rule',
        advisory: true,
        message: 'The form has a cycle of conditions or calculations.',
        diagnostics: `the enableWhen, enableWhenExpression or calculatedExpression of ${names} depend on each other in a cycle: ${effects.join('; ')}`,
        expression: 'QuestionnaireResponse',
        questionnairePath: cycle.items[0]!.path,
        linkId: cycle.items[0]!.linkId,
      },
      `cycle:${cycle.items[0]!.linkId}`,
    );
  }
};

/** Is `def` enabled in `scope` (at `node`, or at a missing instance)? */
const enabledIn = (
  ctx: EngineContext,
  def: ItemDefinition,
  scope: Scope,
  node: ResponseNode | undefined,
): boolean => {
  if (scope.owner && !isEnabled(ctx, scope.owner)) return false;
  if (ctx.form.cyclicEnablement.has(def)) return false;
  const conditions = arrayOf<unknown>(def.item.enableWhen).filter(isObject);
  if (conditions.length > 0) {
    const holds = conditions.map((c) => conditionHolds(ctx, c, def, scope));
    // R5 requires enableBehavior with several conditions; without it all must hold.
    if (!(def.item.enableBehavior === 'any' ? holds.some(Boolean) : holds.every(Boolean))) return false;
  }
  if (def.enableWhenExpression !== undefined) return expressionHolds(ctx, def, scope, node);
  return true;
};

/** The answers of `question` that a condition of `def` in `scope` reads (see the module comment). */
const answersFor = (ctx: EngineContext, question: ItemDefinition, def: ItemDefinition, scope: Scope) => {
  const common = commonAncestor(question, def);
  // Up to the instance of the common ancestor that holds `scope` (the root when there is none).
  let at: Scope = scope;
  while (at.owner && at.owner.def !== common) at = at.owner.scope;
  return occurrencesOf(ctx, at.owner ?? 'root', question)
    .filter((n) => isEnabled(ctx, n))
    .flatMap((n) => answerValues(n.answers));
};

/** The nearest item that is an ancestor of both (undefined: the Questionnaire). */
const commonAncestor = (a: ItemDefinition, b: ItemDefinition): ItemDefinition | undefined => {
  const ancestors = new Set<ItemDefinition>();
  for (let at = a.parent; at; at = at.parent) ancestors.add(at);
  for (let at = b.parent; at; at = at.parent) if (ancestors.has(at)) return at;
  return undefined;
};

/** One enableWhen condition (R5 Questionnaire.item.enableWhen; operators of questionnaire-enable-operator). */
const conditionHolds = (
  ctx: EngineContext,
  condition: Record<string, unknown>,
  def: ItemDefinition,
  scope: Scope,
): boolean => {
  const question =
    typeof condition.question === 'string' ? ctx.form.byLinkId.get(condition.question) : undefined;
  const key = valueKeys(condition, 'answer')[0];
  if (!key) return false;
  const expected = condition[key];
  // A question the form does not hold has no answers: `exists false` and `!=` hold, as unanswered.
  const answers = question ? answersFor(ctx, question, def, scope) : [];
  if (condition.operator === 'exists') return answers.length > 0 === (expected === true);
  const results = answers.map(([k, v]) => compareValues(k, v, key, expected));
  switch (condition.operator) {
    case '=':
      return results.includes(0);
    case '!=':
      return !results.includes(0);
    case '>':
      return results.some((c) => typeof c === 'number' && c > 0);
    case '<':
      return results.some((c) => typeof c === 'number' && c < 0);
    case '>=':
      return results.some((c) => typeof c === 'number' && c >= 0);
    case '<=':
      return results.some((c) => typeof c === 'number' && c <= 0);
    default:
      return false;
  }
};

/** The enableWhenExpression: enabled when it answers exactly `true`; a failure counts as enabled. */
const expressionHolds = (
  ctx: EngineContext,
  def: ItemDefinition,
  scope: Scope,
  node: ResponseNode | undefined,
): boolean => {
  try {
    const result = evaluateItemExpression(ctx, def, scope, node, def.enableWhenExpression!);
    return result.length === 1 && result[0]!.value === true;
  } catch (error) {
    report(
      ctx,
      {
        code: 'processing',
        advisory: true,
        message: 'Whether this question applies could not be worked out; it is shown.',
        diagnostics: `the enableWhenExpression of ${def.label} could not be evaluated (${(error as FhirPathError).message}); the item is treated as enabled`,
        expression: node?.path ?? scope.path,
        questionnairePath: def.path,
        linkId: def.linkId,
        key: node?.key ?? keyAt(scope, def),
      },
      `enableWhenExpression:${def.linkId}`,
    );
    return true;
  }
};
