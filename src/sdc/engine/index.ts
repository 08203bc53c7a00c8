/**
 * The form engine (issue 32): one model of Questionnaire × QuestionnaireResponse with one
 * enableWhen evaluator, one calculatedExpression evaluator and one set of answer checks, used by
 * $validate (src/sdc/validate.ts), $populate (src/sdc/populate.ts), the report editor on the
 * server (src/http/app/editor.ts) and in the browser (src/http/app/browser/engine-worker.ts).
 * Pure TypeScript: no Node modules, no I/O; FHIRPath within the evaluation budget of the platform
 * (src/sdc/budget.ts).
 *
 * A run: place the response on the form (tree.ts; the editor first completes it with every field),
 * decide each item in dependency order — its enablement (enablement.ts), then its calculated value
 * (calculate.ts) — and check the answers (checks.ts); the response as stored is the enabled,
 * answered part (tree.ts `materialize`).
 */
import type { QuestionnaireResponse } from '../types.js';
import { addCalculatedNodes, calculateNode } from './calculate.js';
import { checkResponse } from './checks.js';
import { createContext, type EngineContext, type EngineOptions, type EngineProblem } from './context.js';
import type { FormDefinition, ItemDefinition } from './definition.js';
import { decideEnablement, enabledAt, isEnabled, reportCycles } from './enablement.js';
import {
  completeTree,
  itemsOf,
  keyAt,
  materialize,
  placeResponse,
  type ResponseNode,
  type Scope,
  type StructureProblem,
} from './tree.js';
import type { ValueSetMembers } from './valuesets.js';

export type { EngineOptions, EngineProblem } from './context.js';
export { defineForm, type FormDefinition, type ItemDefinition } from './definition.js';

/** What a run does besides placing and enablement. */
export interface RunOptions extends EngineOptions {
  /** Give every item a node first (the editor: every field on the page). */
  readonly complete?: boolean;
  /** Evaluate calculatedExpressions (the editor and $populate; $validate checks what it is given). */
  readonly calculate?: boolean;
  /** Run the answer checks, with the members of the answerValueSets that could be resolved. */
  readonly valueSets?: ReadonlyMap<string, ValueSetMembers>;
}

/** The outcome of a run. */
export interface FormRun {
  readonly context: EngineContext;
  /** Items of the response that could not be placed, out of order or repeated. */
  readonly structure: readonly StructureProblem[];
  /** Problems of the rules (enablement, calculations, checks), in the order found. */
  readonly problems: readonly EngineProblem[];
  /** The response as stored: enabled, answered items, calculated values included. */
  stored(): QuestionnaireResponse;
  /** Enablement by key: of every node, and of every item's place in every scope. */
  enablementByKey(): Map<string, boolean>;
}

/**
 * Runs the engine over `response` (its items are kept and, with `calculate`, changed: pass a
 * copy to keep the original).
 */
export const runForm = (
  form: FormDefinition,
  response: QuestionnaireResponse,
  options: RunOptions = {},
): FormRun => {
  const structure: StructureProblem[] = [];
  const tree = placeResponse(form, response, (p) => structure.push(p));
  if (options.complete) completeTree(form, tree);
  const context = createContext(form, tree, response, options);
  if (options.calculate) addCalculatedNodes(context);
  evaluate(context, options.calculate === true);
  if (options.valueSets) checkResponse(context, options.valueSets);
  return {
    context,
    structure,
    problems: context.problems,
    stored: () => materialize(tree, response, (node) => isEnabled(context, node)).response,
    enablementByKey: () => enablementByKey(context),
  };
};

/**
 * Decides every node, item by item in evaluation order: its enablement, then (with `calculate`)
 * its calculated value — so a condition on a calculated item reads its new value.
 */
const evaluate = (ctx: EngineContext, calculate: boolean): void => {
  reportCycles(ctx);
  const byDef = new Map<ItemDefinition, ResponseNode[]>();
  for (const node of ctx.tree.nodes) {
    if (!byDef.has(node.def)) byDef.set(node.def, []);
    byDef.get(node.def)!.push(node);
  }
  for (const def of ctx.form.evaluationOrder)
    for (const node of byDef.get(def) ?? []) {
      decideEnablement(ctx, node);
      if (calculate) calculateNode(ctx, node);
    }
};

const enablementByKey = (ctx: EngineContext): Map<string, boolean> => {
  const keys = new Map<string, boolean>();
  const visit = (scope: Scope): void => {
    for (const def of itemsOf(ctx.form, scope)) {
      const nodes = scope.nodes.filter((n) => n.def === def);
      if (def.repeatingGroup || nodes.length === 0) keys.set(keyAt(scope, def), enabledAt(ctx, def, scope));
    }
    for (const node of scope.nodes) {
      keys.set(node.key, isEnabled(ctx, node));
      for (const inner of node.scopes) visit(inner);
    }
  };
  visit(ctx.tree.root);
  return keys;
};

/** The nodes of a run whose item is `linkId`. */
export const nodesOf = (run: FormRun, linkId: string): ResponseNode[] =>
  run.context.tree.nodes.filter((n) => n.def.linkId === linkId);
