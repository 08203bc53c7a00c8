/**
 * The response side of the form engine (issue 32): a QuestionnaireResponse placed on its
 * Questionnaire — one node per response item (a repeating group: one per instance), each in the
 * scope it sits in (the response, a group instance, or an answer of a question with children) —
 * and the same response "as stored": answered items only, disabled items left out
 * ({@link materialize}). Pure.
 *
 * Every node has a key that names it in the editor's page as well: linkIds are unique in a
 * Questionnaire, so a key only needs the instance of each repeating group (and the answer of a
 * question with children) on the way: `nodule[1]/nodule-size`, `bmi`.
 */
import type {
  QuestionnaireResponse,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../types.js';
import type { FormDefinition, ItemDefinition } from './definition.js';
import { arrayOf, isObject } from './extensions.js';

/** One response item placed on its Questionnaire item. */
export interface ResponseNode {
  readonly def: ItemDefinition;
  /** The response item (the engine's own copy). */
  readonly item: QuestionnaireResponseItem;
  /** The answers as the engine sees them: the item's, or those a calculation gave. */
  answers: QuestionnaireResponseAnswer[];
  /** FHIRPath of the item in the response (`QuestionnaireResponse.item[1].item[0]`). */
  readonly path: string;
  readonly scope: Scope;
  /** A group's one scope (`item.item`), or a question's one scope per answer (`answer.item`). */
  readonly scopes: Scope[];
  /** The node's name in the editor's page (see the module comment). */
  readonly key: string;
}

/** A list of sibling nodes: the response's, a group instance's or an answer's. */
export interface Scope {
  readonly parent: Scope | undefined;
  readonly owner: ResponseNode | undefined;
  readonly nodes: ResponseNode[];
  /** Prefix of the keys of the nodes in this scope (`''`, `nodule[1]/`). */
  readonly prefix: string;
  /** FHIRPath of the element holding the scope's items (`QuestionnaireResponse`, `…item[2].answer[0]`). */
  readonly path: string;
  /** How many nodes of each item the scope holds (a repeating group's next instance index). */
  readonly counts: Map<ItemDefinition, number>;
}

/** A placed response. */
export interface ResponseTree {
  /** The response placed (its items are the nodes' items). */
  readonly response: QuestionnaireResponse;
  readonly root: Scope;
  /** Every node, in the order placed (the response's order, depth first). */
  readonly nodes: ResponseNode[];
}

/** A problem of the response's structure (an item that cannot be placed), for $validate. */
export interface StructureProblem {
  readonly code: 'structure';
  readonly diagnostics: string;
  readonly expression: string;
}

/** The key of `def` in `scope`: of the node, or of a missing one (the editor's wrapper). */
export const keyAt = (scope: Scope, def: ItemDefinition): string => `${scope.prefix}${def.linkId}`;

/** The key of instance `index` of a repeating group (or the scope of answer `index` of a question). */
export const instanceKey = (prefix: string, linkId: string, index: number): string =>
  `${prefix}${linkId}[${index}]`;

/** The items of `scope`'s owner in the Questionnaire: its children, or the top-level items. */
export const itemsOf = (form: FormDefinition, scope: Scope): readonly ItemDefinition[] =>
  scope.owner ? scope.owner.def.children : form.roots;

/** Where a scope sits, for diagnostics: `the response`, `group 'Nodule' (linkId "nodule")`. */
const whereOf = (scope: Scope): string =>
  !scope.owner
    ? 'the response'
    : scope.owner.def.type === 'group'
      ? `group ${scope.owner.def.label}`
      : `answer ${scope.owner.scopes.indexOf(scope)} of ${scope.owner.def.label}`;

interface PlaceContext {
  readonly form: FormDefinition;
  readonly nodes: ResponseNode[];
  readonly report: (problem: StructureProblem) => void;
}

const problem = (diagnostics: string, expression: string): StructureProblem => ({
  code: 'structure',
  diagnostics,
  expression,
});

/**
 * Places `response` on `form`. The response's items must mirror the Questionnaire: group children
 * in `item.item`, question children in `item.answer.item`, items in Questionnaire order, repeated
 * instances only of repeating groups. What cannot be placed is reported and left out; what is out
 * of order or repeated is reported and placed.
 * @param response the engine's own copy: nodes hold its items.
 */
export const placeResponse = (
  form: FormDefinition,
  response: QuestionnaireResponse,
  report: (problem: StructureProblem) => void = () => undefined,
): ResponseTree => {
  const context: PlaceContext = { form, nodes: [], report };
  const root: Scope = {
    parent: undefined,
    owner: undefined,
    nodes: [],
    prefix: '',
    path: 'QuestionnaireResponse',
    counts: new Map(),
  };
  placeItems(context, response.item, root);
  return { response, root, nodes: context.nodes };
};

/** Places the items of one scope. */
const placeItems = (context: PlaceContext, items: unknown, scope: Scope): void => {
  if (items === undefined) return;
  const where = whereOf(scope);
  if (!Array.isArray(items)) {
    context.report(problem(`${where}: item must be a list`, `${scope.path}.item`));
    return;
  }
  const definitions = itemsOf(context.form, scope);
  let last = -1;
  items.forEach((raw, i) => {
    const path = `${scope.path}.item[${i}]`;
    if (!isObject(raw) || typeof raw.linkId !== 'string') {
      context.report(problem(`${where}: item ${i} has no linkId`, path));
      return;
    }
    const at = definitions.findIndex((d) => d.linkId === raw.linkId);
    const def = definitions[at];
    if (!def) {
      const known = context.form.byLinkId.get(raw.linkId);
      context.report(
        problem(
          known
            ? `item ${known.label} is not allowed in ${where}: it belongs ${known.parent ? `inside ${known.parent.label}` : 'at the top level of the response'}`
            : `item ${itemLabelOf(raw)} in ${where} is not in the Questionnaire (unknown linkId)`,
          path,
        ),
      );
      return;
    }
    if (at < last)
      context.report(
        problem(
          `item ${def.label} is out of order in ${where}: the Questionnaire puts it before ${definitions[last]!.label}`,
          path,
        ),
      );
    else if (at === last && !def.repeatingGroup)
      context.report(
        problem(
          def.type === 'group'
            ? `group ${def.label} does not repeat but appears more than once in ${where}`
            : `question ${def.label} appears more than once in ${where}: repeated answers belong in one item's answer list`,
          path,
        ),
      );
    last = Math.max(last, at);
    addNode(context, scope, def, raw as unknown as QuestionnaireResponseItem, path);
  });
};

const itemLabelOf = (raw: Record<string, unknown>): string =>
  typeof raw.text === 'string' && raw.text
    ? `'${raw.text}' (linkId ${JSON.stringify(raw.linkId)})`
    : `linkId ${JSON.stringify(raw.linkId)}`;

/** Places one item in `scope` (appended) and its children. */
const addNode = (
  context: PlaceContext,
  scope: Scope,
  def: ItemDefinition,
  item: QuestionnaireResponseItem,
  path: string,
): ResponseNode => {
  const index = scope.counts.get(def) ?? 0;
  scope.counts.set(def, index + 1);
  const key = def.repeatingGroup ? instanceKey(scope.prefix, def.linkId, index) : keyAt(scope, def);
  const node: ResponseNode = {
    def,
    item,
    answers: [],
    path,
    scope,
    scopes: [],
    key,
  };
  scope.nodes.push(node);
  context.nodes.push(node);
  placeChildren(context, node);
  return node;
};

const placeChildren = (context: PlaceContext, node: ResponseNode): void => {
  const { def, item, path } = node;
  const rawAnswers = (item as { answer?: unknown }).answer;
  if (rawAnswers !== undefined && !Array.isArray(rawAnswers)) {
    context.report(problem(`${def.label}: answer must be a list`, `${path}.answer`));
    return;
  }
  const answers = arrayOf<QuestionnaireResponseAnswer>(rawAnswers);
  if (def.type === 'group' || def.type === 'display') {
    if (answers.length > 0)
      context.report(problem(`${def.type} item ${def.label} cannot have answers`, `${path}.answer[0]`));
    if (def.type === 'display' && item.item !== undefined) {
      context.report(problem(`display item ${def.label} cannot have child items`, `${path}.item`));
      return;
    }
    const prefix = def.repeatingGroup ? `${node.key}/` : node.scope.prefix;
    const scope: Scope = { parent: node.scope, owner: node, nodes: [], prefix, path, counts: new Map() };
    node.scopes.push(scope);
    placeItems(context, item.item, scope);
    return;
  }
  node.answers = answers;
  if (item.item !== undefined)
    context.report(
      problem(
        `question ${def.label} cannot have child items directly: items nested under a question belong in answer.item`,
        `${path}.item`,
      ),
    );
  answers.forEach((answer, k) => {
    const scope: Scope = {
      parent: node.scope,
      owner: node,
      nodes: [],
      prefix: `${instanceKey(node.scope.prefix, def.linkId, k)}/`,
      path: `${path}.answer[${k}]`,
      counts: new Map(),
    };
    node.scopes.push(scope);
    if (isObject(answer)) placeItems(context, answer.item, scope);
  });
};

/** The list in the response that holds the items of `scope` (created when missing). */
const containerOf = (tree: ResponseTree, scope: Scope): QuestionnaireResponseItem[] => {
  const holder: { item?: QuestionnaireResponseItem[] } = !scope.owner
    ? tree.response
    : scope.owner.def.type === 'group'
      ? scope.owner.item
      : ((scope.owner.answers[scope.owner.scopes.indexOf(scope)] as { item?: QuestionnaireResponseItem[] }) ??
        {});
  if (!Array.isArray(holder.item)) holder.item = [];
  return holder.item;
};

/**
 * Adds an empty node of `def` to `scope` and its item to the response, both in Questionnaire
 * order (a calculated item the response does not have yet; the editor's empty fields).
 */
export const insertNode = (
  form: FormDefinition,
  tree: ResponseTree,
  scope: Scope,
  def: ItemDefinition,
): ResponseNode => {
  const item: QuestionnaireResponseItem = {
    linkId: def.linkId,
    ...(typeof def.item.text === 'string' ? { text: def.item.text } : {}),
  };
  const before = scope.nodes.filter((n) => n.def.order < def.order).at(-1);
  const container = containerOf(tree, scope);
  const at = before ? container.indexOf(before.item) + 1 : 0;
  container.splice(at, 0, item);
  const context: PlaceContext = { form, nodes: tree.nodes, report: () => undefined };
  const node = addNode(context, scope, def, item, `${scope.path}.item[${at}]`);
  // Keep Questionnaire order among the siblings (the node was appended; sort is stable).
  scope.nodes.sort((a, b) => a.def.order - b.def.order);
  return node;
};

/**
 * Gives every item of the Questionnaire a node in every scope that should hold it: one instance
 * of a missing group (repeating or not), an empty node of a missing question, and the scope of a
 * first answer under a question with children. The editor's tree: every field on the page has a
 * node, answered or not.
 */
export const completeTree = (form: FormDefinition, tree: ResponseTree): void => {
  const complete = (scope: Scope): void => {
    for (const def of itemsOf(form, scope))
      if (def.type !== 'display' && !scope.nodes.some((n) => n.def === def))
        insertNode(form, tree, scope, def);
    for (const node of [...scope.nodes]) {
      if (node.def.type !== 'group' && node.def.children.length > 0 && node.scopes.length === 0)
        node.scopes.push({
          parent: node.scope,
          owner: node,
          nodes: [],
          prefix: `${instanceKey(node.scope.prefix, node.def.linkId, 0)}/`,
          path: `${node.path}.answer[0]`,
          counts: new Map(),
        });
      for (const inner of node.scopes) complete(inner);
    }
  };
  complete(tree.root);
};

/** Every node in `scope` and beneath it. */
export const nodesBeneath = (scope: Scope): ResponseNode[] =>
  scope.nodes.flatMap((n) => [n, ...n.scopes.flatMap(nodesBeneath)]);

/** The response as it would be stored, and each node's item in it. */
export interface Materialized {
  readonly response: QuestionnaireResponse;
  readonly itemOf: ReadonlyMap<ResponseNode, QuestionnaireResponseItem>;
}

/**
 * The response as stored (SDC: only enabled items carry answers; issue 13: no empty items or
 * lists): every node whose `enabled` is not false and that holds an answer, itself or beneath it,
 * with its answers (the node's, e.g. calculated) and its children. The response's other elements
 * are kept; `item` is left out when nothing is answered.
 */
export const materialize = (
  tree: ResponseTree,
  response: QuestionnaireResponse,
  enabled: (node: ResponseNode) => boolean | undefined,
): Materialized => {
  const itemOf = new Map<ResponseNode, QuestionnaireResponseItem>();
  const build = (scope: Scope): QuestionnaireResponseItem[] =>
    scope.nodes.flatMap((node): QuestionnaireResponseItem[] => {
      if (enabled(node) === false) return [];
      const {
        answer: _answer,
        item: _item,
        ...rest
      } = node.item as QuestionnaireResponseItem & { item?: unknown };
      const out: QuestionnaireResponseItem = { ...rest };
      if (node.def.type === 'group') {
        const children = build(node.scopes[0]!);
        if (children.length === 0) return [];
        out.item = children;
      } else {
        const answers = node.answers.flatMap((answer, k): QuestionnaireResponseAnswer[] => {
          if (!isObject(answer)) return [];
          const { item: _nested, ...value } = answer;
          const scope = node.scopes[k];
          const children = scope ? build(scope) : [];
          return [children.length > 0 ? { ...value, item: children } : value];
        });
        if (answers.length === 0) return [];
        out.answer = answers;
      }
      itemOf.set(node, out);
      return [out];
    });
  const { item: _items, ...rest } = response;
  const items = build(tree.root);
  return { response: { ...rest, ...(items.length > 0 ? { item: items } : {}) }, itemOf };
};
