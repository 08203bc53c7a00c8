/**
 * SDC calculatedExpression (issue 32; SDC "Expressions": "the value updates continuously as the
 * answers to dependent questions change"): the one evaluator of the editor (server and browser) and
 * $populate.
 *
 * Every calculated question of every enabled instance is evaluated once, dependencies first
 * (definition.ts `evaluationOrder`: an expression naming the linkId of another calculated item
 * runs after it), on `%resource` as stored so far (context.ts). A calculated question the response
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
import type { ItemDefinition } from './definition.js';
import { isEnabled } from './enablement.js';
import { insertNode, itemsOf, type ResponseNode, type Scope } from './tree.js';

/** Evaluates every calculatedExpression (see the module comment). Call after enablement. */
export const calculate = (ctx: EngineContext): void => {
  const calculated = ctx.form.evaluationOrder.filter((def) => def.calculatedExpression !== undefined);
  if (calculated.length === 0) return;
  addMissingNodes(ctx, calculated);
  for (const def of calculated) {
    if (ctx.form.cyclicCalculation.has(def)) continue;
    for (const node of ctx.tree.nodes.filter((n) => n.def === def)) calculateNode(ctx, def, node);
  }
};

/** Every scope that could hold a calculated item gets a node for it. */
const addMissingNodes = (ctx: EngineContext, calculated: readonly ItemDefinition[]): void => {
  const scopes: Scope[] = [ctx.tree.root, ...ctx.tree.nodes.flatMap((n) => n.scopes)];
  for (const scope of scopes) {
    const expected = itemsOf(ctx.form, scope);
    for (const def of calculated)
      if (expected.includes(def) && !scope.nodes.some((n) => n.def === def)) {
        isEnabled(ctx, insertNode(ctx.form, ctx.tree, scope, def));
      }
  }
};

const setAnswers = (ctx: EngineContext, node: ResponseNode, answers: ResponseNode['answers']): void => {
  if (JSON.stringify(answers) === JSON.stringify(node.answers)) return;
  node.answers = answers;
  if (answers.length > 0) node.item.answer = answers;
  else delete node.item.answer;
  invalidateView(ctx);
};

const calculateNode = (ctx: EngineContext, def: ItemDefinition, node: ResponseNode): void => {
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
