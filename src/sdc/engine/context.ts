/**
 * The explicit context every rule of the form engine works on (issue 32): the form, the placed
 * response, what has been decided so far (enablement), the problems found, and FHIRPath evaluation
 * with SDC's environment. Pure apart from FHIRPath's time budget (src/sdc/budget.ts).
 *
 * FHIRPath (SDC "FHIRPath supplements"): `%resource` is the response as it would be stored —
 * answered items only, without the items found disabled so far ({@link viewOf}) — so an
 * expression reads the same in the editor, where every field is on the page, and in $validate,
 * which gets the stored response. `%context` is the response item of the expression's item (an
 * empty one `{linkId, text}` when the response has none), or the response for the Questionnaire's
 * own expressions. `%questionnaire`, `%qitem`, the `variable`s of the Questionnaire and of the
 * item's ancestors and the item itself (nearest wins), and the caller's environment (launch
 * contexts) are available.
 */
import type { EvaluationBudget } from '../budget.js';
import { evaluateFhirPathTyped, type FhirPathEnv, type TypedValue } from '../fhirpath.js';
import type { QuestionnaireResponse, QuestionnaireResponseItem } from '../types.js';
import type { FormDefinition, ItemDefinition } from './definition.js';
import { EXT_VARIABLE, expressionOf, extensionsOf } from './extensions.js';
import { type Materialized, materialize, type ResponseNode, type ResponseTree, type Scope } from './tree.js';

/** Options of an engine run. */
export interface EngineOptions {
  /** The request's evaluation budget, shared by every expression and regex. */
  readonly budget?: EvaluationBudget;
  /** What `now()` and `today()` answer; the wall clock without it. */
  readonly now?: Date;
  /** Launch contexts and other variables (`%patient`…). */
  readonly environment?: FhirPathEnv;
  /** Questionnaire-level variables given in `environment`: their expressions are not evaluated. */
  readonly suppliedVariables?: ReadonlySet<string>;
  /** Variables bound to a response item and what is beneath it (itemPopulationContext). */
  readonly bindingsOf?: (item: QuestionnaireResponseItem) => FhirPathEnv | undefined;
  /**
   * The permitted answers of items with an answerExpression, computed before the run
   * (src/sdc/answer-expression.ts), by linkId: checked as answerOption is (issue 35).
   */
  readonly computedOptions?: ReadonlyMap<string, readonly Record<string, unknown>[]>;
  /** Items whose answerExpression could not be computed, and why: their answers are not checked. */
  readonly computedUnavailable?: ReadonlyMap<string, string>;
}

/** A problem found by a rule. */
export interface EngineProblem {
  /** OperationOutcome issue type (`required`, `value`, `business-rule`, `processing`…). */
  readonly code: string;
  /** For the person filling the form, beside the field: a sentence without the item's name. */
  readonly message: string;
  /** For an API client: names the item (text and linkId). */
  readonly diagnostics: string;
  /** FHIRPath into the response (`QuestionnaireResponse.item[1].answer[0]`). */
  readonly expression: string;
  /** FHIRPath of the Questionnaire element at fault, for problems of the form itself. */
  readonly questionnairePath?: string;
  /** The item it is about. */
  readonly linkId?: string;
  /** The node (or the missing item's place) it is about: the editor's field. */
  readonly key?: string;
  /** A problem of the Questionnaire or the environment, not of the answers: always a warning. */
  readonly advisory?: boolean;
}

/** The state of one engine run over one response. */
export interface EngineContext {
  readonly form: FormDefinition;
  readonly tree: ResponseTree;
  /** The response being evaluated (its items are the tree's). */
  readonly response: QuestionnaireResponse;
  readonly options: EngineOptions;
  /** Enablement decided so far, per node. */
  readonly enabled: Map<ResponseNode, boolean>;
  readonly problems: EngineProblem[];
  /** Keys of problems reported once per run (a failing expression, a cycle). */
  readonly reportedOnce: Set<string>;
  /** The stored form of the response, rebuilt when enablement or answers change. */
  view: Materialized | undefined;
  /** Variable values of the current view, per variable extension and node ('root' for the Questionnaire's). */
  readonly variables: Map<object, Map<ResponseNode | 'root', unknown[]>>;
  /** The nodes of each item beneath a node ('root': the whole response), built on first use. */
  readonly occurrences: Map<ResponseNode | 'root', Map<ItemDefinition, ResponseNode[]>>;
}

/** Starts a run over a placed response. */
export const createContext = (
  form: FormDefinition,
  tree: ResponseTree,
  response: QuestionnaireResponse,
  options: EngineOptions = {},
): EngineContext => ({
  form,
  tree,
  response,
  options,
  enabled: new Map(),
  problems: [],
  reportedOnce: new Set(),
  view: undefined,
  variables: new Map(),
  occurrences: new Map(),
});

/**
 * The nodes of `def` beneath `owner` (all of them for 'root'), in the tree's order; indexed once
 * per owner, so a condition evaluated in each of many repeat instances stays linear.
 */
export const occurrencesOf = (
  ctx: EngineContext,
  owner: ResponseNode | 'root',
  def: ItemDefinition,
): readonly ResponseNode[] => {
  let index = ctx.occurrences.get(owner);
  if (!index) {
    index = new Map();
    const scopes = owner === 'root' ? [ctx.tree.root] : owner.scopes;
    const pending = [...scopes].reverse();
    // Depth first, in order, without recursion (forms may nest deeply).
    while (pending.length > 0) {
      const scope = pending.pop()!;
      const nodes = [...scope.nodes];
      const stack: ResponseNode[] = nodes.reverse();
      while (stack.length > 0) {
        const node = stack.pop()!;
        if (!index.has(node.def)) index.set(node.def, []);
        index.get(node.def)!.push(node);
        for (let i = node.scopes.length - 1; i >= 0; i--) stack.push(...[...node.scopes[i]!.nodes].reverse());
      }
    }
    ctx.occurrences.set(owner, index);
  }
  return index.get(def) ?? [];
};

/** Records a problem; with `once`, only the first problem of that key in the run. */
export const report = (ctx: EngineContext, problem: EngineProblem, once?: string): void => {
  if (once !== undefined) {
    if (ctx.reportedOnce.has(once)) return;
    ctx.reportedOnce.add(once);
  }
  ctx.problems.push(problem);
};

/** The response as stored so far (see the module comment), built on demand. */
export const viewOf = (ctx: EngineContext): Materialized => {
  ctx.view ??= materialize(ctx.tree, ctx.response, (node) => ctx.enabled.get(node));
  return ctx.view;
};

/** Something `%resource` shows changed (an item disabled, a calculated answer): rebuild it when next read. */
export const invalidateView = (ctx: EngineContext): void => {
  ctx.view = undefined;
  ctx.variables.clear();
};

/** The nodes from the outermost ancestor down to `node` (or down to the owner of `scope`). */
const ancestry = (scope: Scope, node?: ResponseNode): ResponseNode[] => {
  const chain: ResponseNode[] = node ? [node] : [];
  for (let s: Scope | undefined = scope; s?.owner; s = s.owner.scope) chain.unshift(s.owner);
  return chain;
};

/** The response item an expression of `def` runs on: the node's, else an empty one. */
const contextItemOf = (ctx: EngineContext, def: ItemDefinition, node: ResponseNode | undefined) =>
  (node && viewOf(ctx).itemOf.get(node)) ?? {
    linkId: def.linkId,
    ...(typeof def.item.text === 'string' ? { text: def.item.text } : {}),
  };

/** Evaluates the variables of one element in order, into `env`; a failing one is reported and empty. */
const bindVariables = (
  ctx: EngineContext,
  element: { extension?: unknown },
  owner: ResponseNode | 'root' | undefined,
  focus: { node: unknown; base?: string },
  env: FhirPathEnv,
  pathOf: (index: number) => string,
): void => {
  for (const { ext, index } of extensionsOf(element, EXT_VARIABLE)) {
    const expression = expressionOf(ext);
    const name = expression?.name;
    if (typeof name !== 'string' || !name) continue;
    if (owner === 'root' && ctx.options.suppliedVariables?.has(name)) continue;
    let values = owner === undefined ? undefined : ctx.variables.get(ext)?.get(owner);
    if (values === undefined) {
      values = [];
      if (
        typeof expression?.expression === 'string' &&
        (expression.language ?? 'text/fhirpath') === 'text/fhirpath'
      )
        try {
          values = evaluateFhirPathTyped(
            focus.node,
            expression.expression,
            env,
            fhirPathOptions(ctx, focus.base),
          ).map((r) => r.raw);
        } catch (error) {
          const path = pathOf(index);
          report(
            ctx,
            {
              code: 'processing',
              advisory: true,
              message: `The variable %${name} could not be evaluated.`,
              diagnostics: `variable %${name} '${expression.expression}' failed: ${error instanceof Error ? error.message : String(error)}`,
              expression: owner === 'root' || owner === undefined ? 'QuestionnaireResponse' : owner.path,
              questionnairePath: path,
            },
            `variable:${path}`,
          );
        }
      if (owner !== undefined) {
        if (!ctx.variables.has(ext)) ctx.variables.set(ext, new Map());
        ctx.variables.get(ext)!.set(owner, values);
      }
    }
    env[name] = values;
  }
};

const fhirPathOptions = (ctx: EngineContext, base: string | undefined) => ({
  ...(base ? { base } : {}),
  ...(ctx.options.now ? { now: ctx.options.now } : {}),
  ...(ctx.options.budget ? { budget: ctx.options.budget } : {}),
});

/**
 * Evaluates a FHIRPath expression of item `def` (at `node`, or at a missing instance in `scope`)
 * with SDC's environment (see the module comment).
 * @throws {FhirPathError} when the expression fails or runs out of its budget.
 */
export const evaluateItemExpression = (
  ctx: EngineContext,
  def: ItemDefinition,
  scope: Scope,
  node: ResponseNode | undefined,
  expression: string,
): TypedValue[] => {
  const view = viewOf(ctx);
  const env: FhirPathEnv = { ...ctx.options.environment };
  const questionnaire = ctx.form.questionnaire;
  Object.assign(env, { resource: view.response, rootResource: view.response, questionnaire });
  bindVariables(
    ctx,
    questionnaire,
    'root',
    { node: view.response },
    env,
    (i) => `Questionnaire.extension[${i}]`,
  );
  for (const at of ancestry(scope, node)) {
    const bound = ctx.options.bindingsOf?.(at.item);
    if (bound) Object.assign(env, bound);
    env.qitem = at.def.item;
    bindVariables(
      ctx,
      at.def.item,
      at,
      { node: contextItemOf(ctx, at.def, at), base: 'QuestionnaireResponse.item' },
      env,
      (i) => `${at.def.path}.extension[${i}]`,
    );
  }
  env.qitem = def.item;
  // A missing instance: the variables of the item itself, on its empty item (not kept: per scope).
  if (!node)
    bindVariables(
      ctx,
      def.item,
      undefined,
      { node: contextItemOf(ctx, def, undefined), base: 'QuestionnaireResponse.item' },
      env,
      (i) => `${def.path}.extension[${i}]`,
    );
  return evaluateFhirPathTyped(
    contextItemOf(ctx, def, node),
    expression,
    env,
    fhirPathOptions(ctx, 'QuestionnaireResponse.item'),
  );
};

/**
 * Evaluates a Questionnaire-level FHIRPath expression on the response (`%context` is the
 * response).
 * @throws {FhirPathError} when the expression fails or runs out of its budget.
 */
export const evaluateRootExpression = (ctx: EngineContext, expression: string): TypedValue[] => {
  const view = viewOf(ctx);
  const env: FhirPathEnv = {
    ...ctx.options.environment,
    resource: view.response,
    rootResource: view.response,
    questionnaire: ctx.form.questionnaire,
  };
  bindVariables(
    ctx,
    ctx.form.questionnaire,
    'root',
    { node: view.response },
    env,
    (i) => `Questionnaire.extension[${i}]`,
  );
  return evaluateFhirPathTyped(view.response, expression, env, fhirPathOptions(ctx, undefined));
};
