/**
 * The Questionnaire side of the form engine (issue 32): every item once, in document order, with
 * its parent and children, and the order in which enablement and calculations are evaluated.
 * Pure; built once per Questionnaire and shared by $validate, $populate, the editor on the server
 * and the editor's Web Worker.
 *
 * Dependencies (SDC "Dependencies between expressions"): an item depends on its parent (a disabled
 * group disables its children), on the questions its enableWhen names, and on the items its
 * enableWhenExpression or calculatedExpression reads — the linkIds its FHIRPath compares with
 * `linkId` and, through the `variable`s it names, theirs (src/sdc/fhirpath.ts
 * `expressionReferences`). Items are evaluated dependencies first, otherwise in document order.
 * Items on a cycle of dependencies are decided without evaluating the cycle: an item whose
 * enableWhen or enableWhenExpression is on a cycle is disabled, a calculatedExpression on a cycle
 * is not evaluated; each cycle is reported once.
 */
import { expressionReferences } from '../fhirpath.js';
import type { Questionnaire, QuestionnaireItem } from '../types.js';
import {
  arrayOf,
  EXT_CALCULATED_EXPRESSION,
  EXT_ENABLE_WHEN_EXPRESSION,
  EXT_VARIABLE,
  type ExpressionValue,
  expressionOf,
  extensionsOf,
  isObject,
} from './extensions.js';

/** One item of the Questionnaire. */
export interface ItemDefinition {
  readonly item: QuestionnaireItem;
  readonly linkId: string;
  readonly type: string;
  readonly parent: ItemDefinition | undefined;
  readonly children: readonly ItemDefinition[];
  /** Position in document order (depth first). */
  readonly order: number;
  /** FHIRPath of the item in the Questionnaire (`Questionnaire.item[1].item[0]`). */
  readonly path: string;
  /** For diagnostics: `'Mean diameter' (linkId "nodule-size")`. */
  readonly label: string;
  /** A group whose instances repeat. */
  readonly repeatingGroup: boolean;
  /** The item's enableWhenExpression (FHIRPath), when it has one. */
  readonly enableWhenExpression: string | undefined;
  /** The item's calculatedExpression (questions only), when it has one. */
  readonly calculatedExpression: ExpressionValue | undefined;
}

/** A cycle of dependencies between items, reported once. */
export interface DependencyCycle {
  /** The items on the cycle, in document order. */
  readonly items: readonly ItemDefinition[];
  /** Items whose enableWhen/enableWhenExpression is on the cycle: treated as disabled. */
  readonly disabled: readonly ItemDefinition[];
  /** Items whose calculatedExpression is on the cycle: not calculated. */
  readonly uncalculated: readonly ItemDefinition[];
}

/** A Questionnaire as the form engine reads it. */
export interface FormDefinition {
  readonly questionnaire: Questionnaire;
  /** Top-level items. */
  readonly roots: readonly ItemDefinition[];
  /** Every item, document order. */
  readonly items: readonly ItemDefinition[];
  /** The first item of each linkId. */
  readonly byLinkId: ReadonlyMap<string, ItemDefinition>;
  /** Every item, dependencies first (see the module comment). */
  readonly evaluationOrder: readonly ItemDefinition[];
  readonly cycles: readonly DependencyCycle[];
  /** Items treated as disabled because their enablement is on a cycle. */
  readonly cyclicEnablement: ReadonlySet<ItemDefinition>;
  /** Items not calculated because their calculatedExpression is on a cycle. */
  readonly cyclicCalculation: ReadonlySet<ItemDefinition>;
}

/** `'Text' (linkId "x")`, or `linkId "x"` without a text. */
export const itemLabel = (item: { linkId?: unknown; text?: unknown }): string =>
  typeof item.text === 'string' && item.text
    ? `'${item.text}' (linkId ${JSON.stringify(item.linkId)})`
    : `linkId ${JSON.stringify(item.linkId)}`;

/** The FHIRPath of an Expression extension, when it is FHIRPath (no language means FHIRPath). */
const fhirPathOf = (element: { extension?: unknown }, url: string): ExpressionValue | undefined => {
  const ext = extensionsOf(element, url)[0]?.ext;
  const expression = ext ? expressionOf(ext) : undefined;
  return expression && typeof expression.expression === 'string' ? expression : undefined;
};

/**
 * Reads a Questionnaire (anything malformed is skipped: items without a string linkId, non-object
 * items) and plans its evaluation.
 */
export const defineForm = (questionnaire: Questionnaire): FormDefinition => {
  const items: ItemDefinition[] = [];
  const byLinkId = new Map<string, ItemDefinition>();
  const read = (list: unknown, parent: ItemDefinition | undefined, parentPath: string): ItemDefinition[] => {
    const out: ItemDefinition[] = [];
    arrayOf<unknown>(list).forEach((raw, index) => {
      if (!isObject(raw) || typeof raw.linkId !== 'string') return;
      const item = raw as QuestionnaireItem;
      const children: ItemDefinition[] = [];
      const type = typeof item.type === 'string' ? item.type : '';
      const definition: ItemDefinition = {
        item,
        linkId: item.linkId,
        type,
        parent,
        children,
        order: items.length,
        path: `${parentPath}.item[${index}]`,
        label: itemLabel(item),
        repeatingGroup: type === 'group' && item.repeats === true,
        enableWhenExpression: fhirPathOf(item, EXT_ENABLE_WHEN_EXPRESSION)?.expression,
        calculatedExpression:
          type !== 'group' && type !== 'display' ? fhirPathOf(item, EXT_CALCULATED_EXPRESSION) : undefined,
      };
      items.push(definition);
      if (!byLinkId.has(item.linkId)) byLinkId.set(item.linkId, definition);
      children.push(...read(item.item, definition, definition.path));
      out.push(definition);
    });
    return out;
  };
  const roots = read(questionnaire.item, undefined, 'Questionnaire');
  const plan = planEvaluation(questionnaire, items, byLinkId);
  return { questionnaire, roots, items, byLinkId, ...plan };
};

/** `item` and every item beneath it. */
const subtree = (item: ItemDefinition): ItemDefinition[] => [item, ...item.children.flatMap(subtree)];

/** The `variable` extensions of an element: name → expression. */
const variablesOf = (element: { extension?: unknown }): Map<string, string> => {
  const variables = new Map<string, string>();
  for (const { ext } of extensionsOf(element, EXT_VARIABLE)) {
    const expression = expressionOf(ext);
    if (typeof expression?.name === 'string' && typeof expression.expression === 'string')
      variables.set(expression.name, expression.expression);
  }
  return variables;
};

/** The items an expression on `item` reads: linkIds it names, directly or through variables in scope. */
const readsOf = (
  expression: string,
  item: ItemDefinition,
  questionnaire: Questionnaire,
  byLinkId: ReadonlyMap<string, ItemDefinition>,
): ItemDefinition[] => {
  // Variables in scope: the Questionnaire's, then each ancestor's and the item's own (nearest wins).
  const scope = new Map<string, string>(variablesOf(questionnaire));
  const chain: ItemDefinition[] = [];
  for (let at: ItemDefinition | undefined = item; at; at = at.parent) chain.unshift(at);
  for (const at of chain) for (const [name, text] of variablesOf(at.item)) scope.set(name, text);
  const linkIds = new Set<string>();
  const seen = new Set<string>();
  const pending = [expression];
  while (pending.length > 0) {
    const references = expressionReferences(pending.pop()!);
    for (const linkId of references.linkIds) linkIds.add(linkId);
    for (const name of references.variables)
      if (!seen.has(name) && scope.has(name)) {
        seen.add(name);
        pending.push(scope.get(name)!);
      }
  }
  return [...linkIds].flatMap((linkId) => {
    const read = byLinkId.get(linkId);
    return read ? subtree(read) : [];
  });
};

/** Tarjan's strongly connected components, dependencies first; starts in document order. */
const components = (items: readonly ItemDefinition[], edges: Map<ItemDefinition, Set<ItemDefinition>>) => {
  const index = new Map<ItemDefinition, number>();
  const low = new Map<ItemDefinition, number>();
  const onStack = new Set<ItemDefinition>();
  const stack: ItemDefinition[] = [];
  const result: ItemDefinition[][] = [];
  let counter = 0;
  const visit = (v: ItemDefinition): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of [...(edges.get(v) ?? [])].sort((a, b) => a.order - b.order)) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: ItemDefinition[] = [];
      let w: ItemDefinition;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      result.push(component.sort((a, b) => a.order - b.order));
    }
  };
  for (const item of items) if (!index.has(item)) visit(item);
  return result;
};

const planEvaluation = (
  questionnaire: Questionnaire,
  items: readonly ItemDefinition[],
  byLinkId: ReadonlyMap<string, ItemDefinition>,
): Pick<FormDefinition, 'evaluationOrder' | 'cycles' | 'cyclicEnablement' | 'cyclicCalculation'> => {
  const enablementReads = new Map<ItemDefinition, Set<ItemDefinition>>();
  const calculationReads = new Map<ItemDefinition, Set<ItemDefinition>>();
  const edges = new Map<ItemDefinition, Set<ItemDefinition>>();
  for (const item of items) {
    const enablement = new Set<ItemDefinition>();
    for (const condition of arrayOf<unknown>(item.item.enableWhen)) {
      const question = isObject(condition) ? condition.question : undefined;
      const read = typeof question === 'string' ? byLinkId.get(question) : undefined;
      if (read) enablement.add(read);
    }
    if (item.enableWhenExpression !== undefined)
      for (const read of readsOf(item.enableWhenExpression, item, questionnaire, byLinkId))
        enablement.add(read);
    const calculation = new Set<ItemDefinition>(
      item.calculatedExpression?.expression !== undefined
        ? readsOf(item.calculatedExpression.expression, item, questionnaire, byLinkId)
        : [],
    );
    enablementReads.set(item, enablement);
    calculationReads.set(item, calculation);
    edges.set(item, new Set([...(item.parent ? [item.parent] : []), ...enablement, ...calculation]));
  }
  const evaluationOrder: ItemDefinition[] = [];
  const cycles: DependencyCycle[] = [];
  const cyclicEnablement = new Set<ItemDefinition>();
  const cyclicCalculation = new Set<ItemDefinition>();
  for (const component of components(items, edges)) {
    evaluationOrder.push(...component);
    const members = new Set(component);
    const cyclic = component.length > 1 || edges.get(component[0]!)!.has(component[0]!);
    if (!cyclic) continue;
    const disabled = component.filter((item) => [...enablementReads.get(item)!].some((r) => members.has(r)));
    const uncalculated = component.filter((item) =>
      [...calculationReads.get(item)!].some((r) => members.has(r)),
    );
    for (const item of disabled) cyclicEnablement.add(item);
    for (const item of uncalculated) cyclicCalculation.add(item);
    cycles.push({ items: component, disabled, uncalculated });
  }
  return { evaluationOrder, cycles, cyclicEnablement, cyclicCalculation };
};
