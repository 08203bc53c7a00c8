/**
 * SDC calculatedExpression (issue 32; SDC "Expressions": "the value updates continuously as the
 * answers to dependent questions change"): the one evaluator of the editor (server and browser) and
 * $populate.
 *
 * Every calculated question of every enabled instance is evaluated once, dependencies first
 * (definition.ts `evaluationOrder`, driven by index.ts: an expression naming the linkId of another
 * item runs after that item's enablement and calculation, and an item whose enableWhen reads a
 * calculated value is decided after it), on `%resource` as stored so far (context.ts). A calculated question the response
 * lacks is added (in every enabled instance of its parent). The result, converted to the item's
 * answer type (answers.ts), replaces the item's answers; an empty result clears them. A
 * calculatedExpression on a cycle is not evaluated (its answers are left as they are); one that
 * fails or runs out of budget is reported once as a warning and leaves the item unanswered; a
 * value that does not fit the item is reported and left out. Calculated items of disabled
 * instances are cleared.
 */
import type { FhirPathError } from '../fhirpath.js';
import { answersFromResults } from './answers.js';
import { type EngineContext, evaluateItemExpression, invalidateView, report } from './context.js';
import { isEnabled } from './enablement.js';
import { insertNode, itemsOf, type ResponseNode, type Scope } from './tree.js';

/**
 * Every scope that could hold a calculated item gets a node for it (before anything is decided:
 * the new nodes take their place in the evaluation order).
 */
export const addCalculatedNodes = (ctx: EngineContext): void => {
  const calculated = ctx.form.items.filter((def) => def.calculatedExpression !== undefined);
  if (calculated.length === 0) return;
  const scopes: Scope[] = [ctx.tree.root, ...ctx.tree.nodes.flatMap((n) => n.scopes)];
  for (const scope of scopes) {
    const expected = itemsOf(ctx.form, scope);
    for (const def of calculated)
      if (expected.includes(def) && !scope.nodes.some((n) => n.def === def))
        insertNode(ctx.form, ctx.tree, scope, def);
  }
  ctx.occurrences.clear();
};

const setAnswers = (ctx: EngineContext, node: ResponseNode, answers: ResponseNode['answers']): void => {
  if (JSON.stringify(answers) === JSON.stringify(node.answers)) return;
  node.answers = answers;
  if (answers.length > 0) node.item.answer = answers;
  else delete node.item.answer;
  invalidateView(ctx);
};

/**
 * Evaluates the calculatedExpression of one node (after its enablement was decided); a disabled
 * node is cleared, a calculation on a cycle is not evaluated.
 */
export const calculateNode = (ctx: EngineContext, node: ResponseNode): void => {
  const { def } = node;
  if (def.calculatedExpression === undefined || ctx.form.cyclicCalculation.has(def)) return;
  if (!isEnabled(ctx, node)) {
    setAnswers(ctx, node, []);
    return;
  }
  const expression = def.calculatedExpression!;
  const language = expression.language ?? 'text/fhirpath';
  if (language !== 'text/fhirpath') {
    report(
      ctx,
      {
        code: 'not-supported',
        advisory: true,
        message: 'This value cannot be calculated here.',
        diagnostics: `calculatedExpression in language ${language} is not supported (only text/fhirpath); it is ignored`,
        expression: node.path,
        questionnairePath: def.path,
        linkId: def.linkId,
        key: node.key,
      },
      `calculatedExpression:${def.linkId}`,
    );
    return;
  }
  let results: ReturnType<typeof evaluateItemExpression>;
  try {
    results = evaluateItemExpression(ctx, def, node.scope, node, expression.expression!);
  } catch (error) {
    report(
      ctx,
      {
        code: 'processing',
        advisory: true,
        message: 'This value could not be calculated.',
        diagnostics: `calculatedExpression '${expression.expression}' failed: ${(error as FhirPathError).message}`,
        expression: node.path,
        questionnairePath: def.path,
        linkId: def.linkId,
        key: node.key,
      },
      `calculatedExpression:${def.linkId}`,
    );
    setAnswers(ctx, node, []);
    return;
  }
  const { answers, problems } = answersFromResults('calculatedExpression', def.item, results);
  for (const problem of problems)
    report(
      ctx,
      {
        code: problem.code,
        advisory: true,
        message: 'The calculated value does not fit this question.',
        diagnostics: problem.diagnostics,
        expression: node.path,
        questionnairePath: def.path,
        linkId: def.linkId,
        key: node.key,
      },
      `calculatedExpression:${def.linkId}:${problem.diagnostics}`,
    );
  setAnswers(ctx, node, answers);
};
