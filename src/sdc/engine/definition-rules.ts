/**
 * The rules of a Questionnaire itself (issue 35; docs/interface.md §2.6 "Questionnaire rules"):
 * the R5 invariants of Questionnaire and its items (que-1a … que-15, from the R5
 * StructureDefinition-Questionnaire of npm `hl7.fhir.r5.core`) and the rules R5 states in prose
 * on enableWhen, answerOption and initial. One implementation: the FHIR write path (create,
 * update, transaction entries: src/fhir/workflow.schema.ts) refuses a Questionnaire with an error
 * here, and $validate reports them for a Questionnaire given inline. Pure, browser-safe.
 *
 * Each problem names the item by its FHIRPath in the Questionnaire (`Questionnaire.item[2].item[0]`)
 * and its linkId in the diagnostics.
 *
 * Rules (error unless marked):
 * - que-2 linkIds unique in the Questionnaire.
 * - que-1a a group has items when the Questionnaire is complete (R5's expression compares status
 *   with `complete`, a status Questionnaire does not have: it never fires, kept as written).
 * - que-1b (warning) a group should have items. que-1c a display item has no items.
 * - que-3 no `code` on a display item. que-4 not both answerOption and answerValueSet.
 * - que-5 answerOption/answerValueSet only on coding, decimal, integer, date, dateTime, time,
 *   string, quantity items — and reference items, whose answerOption.valueReference R5 defines. que-6 no required/repeats on display items.
 * - que-7 operator `exists` takes answerBoolean.
 * - que-8 no initial on group or display items. que-9 no readOnly on display items.
 * - que-10 maxLength only on boolean, decimal, integer, string, text, url items (or
 *   answerConstraint optionsOrString). que-11 not both answerOption and initial.
 * - que-12 several enableWhen need enableBehavior. que-13 several initial values need repeats.
 * - que-14 (warning) answerConstraint only with answerOption or answerValueSet.
 * - que-15 (warning) a linkId has at most 255 characters.
 * - enableWhen: `question` names an item of the Questionnaire, not the item itself, that takes
 *   answers (not a group or display); the answer[x] is of the question's type (answerString too
 *   for an optionsOrString question) and valid; `>`, `<`, `>=`, `<=` only on ordered types.
 * - answerOption: value[x] of the item's type (R5 answerOption.value[x] is integer, date, time,
 *   string, Coding or Reference) and valid; one initialSelected at most unless the item repeats.
 * - initial: one value[x] of the item's type and valid syntax.
 */

import { itemLabel } from './definition.js';
import { arrayOf, isObject } from './extensions.js';
import { answerKeyOf, syntaxProblem, valueKeys } from './values.js';

/** One problem of a Questionnaire. */
export interface DefinitionProblem {
  /** The R5 invariant (`que-2`) or the rule's name (`enableWhen-question`). */
  readonly key: string;
  readonly severity: 'error' | 'warning';
  /** Path of the element in the Questionnaire, as keys (`['item', 2, 'item', 0]`). */
  readonly path: readonly (string | number)[];
  /** FHIRPath of the element (`Questionnaire.item[2].item[0]`). */
  readonly expression: string;
  /** The item's linkId, when the problem is on an item. */
  readonly linkId?: string;
  /** `que-2: 'Size' (linkId "size") …`: the rule, the item and what is wrong. */
  readonly diagnostics: string;
}

/** An item as the rules see it: where it is, and its parent. */
interface ItemAt {
  readonly item: Record<string, unknown>;
  readonly path: readonly (string | number)[];
  readonly expression: string;
  readonly type: string;
}

// que-5 as R5 writes it, plus reference: R5 answerOption.value[x] includes Reference, which only a
// reference item can take (the expression leaves it out; a deliberate, documented deviation).
const QUESTION_TYPES_WITH_OPTIONS = [
  'coding',
  'decimal',
  'integer',
  'date',
  'dateTime',
  'time',
  'string',
  'quantity',
  'reference',
];
const MAX_LENGTH_TYPES = ['boolean', 'decimal', 'integer', 'string', 'text', 'url'];
const ORDERED_OPERATORS = ['>', '<', '>=', '<='];
const UNORDERED_TYPES = ['boolean', 'coding', 'reference', 'attachment', 'url'];
const OPERATORS = ['exists', '=', '!=', '>', '<', '>=', '<='];

/** FHIRPath of a key path inside a Questionnaire. */
export const questionnairePath = (path: readonly (string | number)[]): string =>
  path.reduce<string>(
    (text, key) => (typeof key === 'number' ? `${text}[${key}]` : `${text}.${key}`),
    'Questionnaire',
  );

/** Every object item, depth first, with its path (items without an object shape are the schema's business). */
const itemsOf = (questionnaire: Record<string, unknown>): ItemAt[] => {
  const out: ItemAt[] = [];
  const walk = (list: unknown, at: readonly (string | number)[]): void =>
    arrayOf<unknown>(list).forEach((raw, index) => {
      if (!isObject(raw)) return;
      const path = [...at, 'item', index];
      out.push({
        item: raw,
        path,
        expression: questionnairePath(path),
        type: typeof raw.type === 'string' ? raw.type : '',
      });
      walk(raw.item, path);
    });
  walk(questionnaire.item, []);
  return out;
};

/** The answer key an item of `type` takes in enableWhen (`answerCoding`); undefined for groups, display, question. */
const enableWhenKeyOf = (type: string): string | undefined => answerKeyOf(type)?.replace(/^value/, 'answer');

/**
 * The problems of a Questionnaire (see the module comment). Never throws: anything malformed
 * that the schema lets through (a missing type, an item that is not an object) is skipped.
 * @param questionnaire a Questionnaire resource (JSON).
 * @returns errors and warnings, in document order per rule.
 */
export const questionnaireProblems = (questionnaire: unknown): DefinitionProblem[] => {
  if (!isObject(questionnaire)) return [];
  const items = itemsOf(questionnaire);
  const problems: DefinitionProblem[] = [];
  const add = (
    key: string,
    at: ItemAt,
    detail: string,
    suffix: readonly (string | number)[] = [],
    severity: 'error' | 'warning' = 'error',
  ): void => {
    const path = [...at.path, ...suffix];
    problems.push({
      key,
      severity,
      path,
      expression: questionnairePath(path),
      ...(typeof at.item.linkId === 'string' ? { linkId: at.item.linkId } : {}),
      diagnostics: `${key}: ${itemLabel(at.item)} ${detail}`,
    });
  };
  const byLinkId = new Map<string, ItemAt>();
  for (const at of items) {
    const linkId = at.item.linkId;
    if (typeof linkId !== 'string') continue;
    const first = byLinkId.get(linkId);
    if (first)
      add(
        'que-2',
        at,
        `repeats the linkId of ${first.expression}: linkIds are unique within the Questionnaire`,
        ['linkId'],
      );
    else byLinkId.set(linkId, at);
  }
  for (const at of items) itemProblems(at, byLinkId, questionnaire, add);
  return problems;
};

type Add = (
  key: string,
  at: ItemAt,
  detail: string,
  suffix?: readonly (string | number)[],
  severity?: 'error' | 'warning',
) => void;

const present = (value: unknown): boolean =>
  value !== undefined && value !== null && !(Array.isArray(value) && value.length === 0);

/** The R5 invariants on one item (que-1 … que-15 but que-2) and the prose rules. */
const itemProblems = (
  at: ItemAt,
  byLinkId: ReadonlyMap<string, ItemAt>,
  questionnaire: Record<string, unknown>,
  add: Add,
): void => {
  const { item, type } = at;
  const children = present(item.item);
  const options = arrayOf<unknown>(item.answerOption);
  const initial = arrayOf<unknown>(item.initial);
  if (type === 'group' && questionnaire.status === 'complete' && !children)
    add('que-1a', at, 'is a group without items');
  if (type === 'group' && !children) add('que-1b', at, 'is a group without items', [], 'warning');
  if (type === 'display' && children) add('que-1c', at, 'is a display item but has items', ['item']);
  if (type === 'display' && present(item.code))
    add('que-3', at, 'is a display item but has a code', ['code']);
  if (options.length > 0 && present(item.answerValueSet))
    add('que-4', at, 'has both answerOption and answerValueSet', ['answerValueSet']);
  if (!QUESTION_TYPES_WITH_OPTIONS.includes(type) && (options.length > 0 || present(item.answerValueSet)))
    add(
      'que-5',
      at,
      `is of type ${type}: only ${QUESTION_TYPES_WITH_OPTIONS.join(', ')} items have answerOption or answerValueSet`,
      [options.length > 0 ? 'answerOption' : 'answerValueSet'],
    );
  if (type === 'display' && (present(item.required) || present(item.repeats)))
    add('que-6', at, 'is a display item: it cannot be required or repeat', [
      present(item.required) ? 'required' : 'repeats',
    ]);
  if ((type === 'group' || type === 'display') && initial.length > 0)
    add('que-8', at, `is a ${type} item: it cannot have initial values`, ['initial']);
  if (type === 'display' && present(item.readOnly))
    add('que-9', at, 'is a display item: it cannot be readOnly', ['readOnly']);
  if (
    present(item.maxLength) &&
    !MAX_LENGTH_TYPES.includes(type) &&
    item.answerConstraint !== 'optionsOrString' &&
    item.answerConstraint !== 'optionOrString'
  )
    add('que-10', at, `is of type ${type}: maxLength is for ${MAX_LENGTH_TYPES.join(', ')} items`, [
      'maxLength',
    ]);
  if (options.length > 0 && initial.length > 0)
    add('que-11', at, 'has both answerOption and initial: mark the option with initialSelected instead', [
      'initial',
    ]);
  const conditions = arrayOf<unknown>(item.enableWhen);
  if (conditions.length > 1 && !present(item.enableBehavior))
    add('que-12', at, `has ${conditions.length} enableWhen conditions but no enableBehavior (all or any)`, [
      'enableBehavior',
    ]);
  if (item.repeats !== true && initial.length > 1)
    add('que-13', at, `does not repeat but has ${initial.length} initial values`, ['initial']);
  if (present(item.answerConstraint) && options.length === 0 && !present(item.answerValueSet))
    add(
      'que-14',
      at,
      'has an answerConstraint without answerOption or answerValueSet',
      ['answerConstraint'],
      'warning',
    );
  if (typeof item.linkId === 'string' && [...item.linkId].length > 255)
    add('que-15', at, 'has a linkId longer than 255 characters', ['linkId'], 'warning');
  for (const [index, condition] of conditions.entries())
    enableWhenProblems(at, condition, index, byLinkId, add);
  optionProblems(at, options, add);
  initialProblems(at, initial, add);
};

/** que-7 and the enableWhen rules: the question exists, takes answers, and the answer fits it. */
const enableWhenProblems = (
  at: ItemAt,
  condition: unknown,
  index: number,
  byLinkId: ReadonlyMap<string, ItemAt>,
  add: Add,
): void => {
  const where = ['enableWhen', index];
  if (!isObject(condition)) return;
  const { question, operator } = condition;
  const keys = valueKeys(condition, 'answer');
  if (operator === 'exists' && (keys.length !== 1 || keys[0] !== 'answerBoolean'))
    add('que-7', at, `enableWhen[${index}] has operator exists, which takes answerBoolean`, where);
  if (typeof question !== 'string') return;
  const target = byLinkId.get(question);
  if (!target) {
    add(
      'enableWhen-question',
      at,
      `enableWhen[${index}] names question ${JSON.stringify(question)}, which is not an item of the Questionnaire`,
      [...where, 'question'],
    );
    return;
  }
  if (target.item === at.item) {
    add('enableWhen-question', at, `enableWhen[${index}] names the item itself`, [...where, 'question']);
    return;
  }
  if (target.type === 'group' || target.type === 'display') {
    add(
      'enableWhen-question',
      at,
      `enableWhen[${index}] names ${itemLabel(target.item)}, a ${target.type} item, which has no answers`,
      [...where, 'question'],
    );
    return;
  }
  if (
    operator === 'exists' ||
    typeof operator !== 'string' ||
    !OPERATORS.includes(operator) ||
    keys.length !== 1
  )
    return;
  const key = keys[0]!;
  const expected = enableWhenKeyOf(target.type);
  const open = target.item.answerConstraint === 'optionsOrString';
  if (expected && key !== expected && !(open && key === 'answerString')) {
    add(
      'enableWhen-answer',
      at,
      `enableWhen[${index}] compares ${itemLabel(target.item)} (type ${target.type}) with ${key}; it takes ${expected}`,
      [...where, key],
    );
    return;
  }
  if (ORDERED_OPERATORS.includes(operator) && UNORDERED_TYPES.includes(target.type))
    add(
      'enableWhen-operator',
      at,
      `enableWhen[${index}] uses operator ${operator} on ${itemLabel(target.item)}, a ${target.type} item, whose answers are not ordered`,
      [...where, 'operator'],
    );
  const syntax = syntaxProblem(key, condition[key]);
  if (syntax) add('enableWhen-answer', at, `enableWhen[${index}].${key} ${syntax}`, [...where, key]);
};

/** answerOption values fit the item's type; one initialSelected unless the item repeats. */
const optionProblems = (at: ItemAt, options: readonly unknown[], add: Add): void => {
  const expected = answerKeyOf(at.type);
  let selected = 0;
  options.forEach((option, index) => {
    if (!isObject(option)) return;
    if (option.initialSelected === true) selected++;
    const keys = valueKeys(option, 'value');
    const where = ['answerOption', index];
    if (keys.length !== 1) {
      add('answerOption-value', at, `answerOption[${index}] needs exactly one value[x]`, where);
      return;
    }
    const key = keys[0]!;
    if (expected && key !== expected) {
      add(
        'answerOption-value',
        at,
        `is of type ${at.type}: answerOption[${index}] holds ${key}, not ${expected}`,
        [...where, key],
      );
      return;
    }
    const syntax = syntaxProblem(key, option[key]);
    if (syntax) add('answerOption-value', at, `answerOption[${index}].${key} ${syntax}`, [...where, key]);
  });
  if (selected > 1 && at.item.repeats !== true)
    add(
      'answerOption-initialSelected',
      at,
      `does not repeat but ${selected} answerOptions are initialSelected`,
      ['answerOption'],
    );
};

/** initial values: one value[x] each, of the item's type, valid syntax. */
const initialProblems = (at: ItemAt, initial: readonly unknown[], add: Add): void => {
  const expected = answerKeyOf(at.type);
  if (!expected) return; // groups and display items: que-8
  initial.forEach((value, index) => {
    if (!isObject(value)) return;
    const keys = valueKeys(value, 'value');
    const where = ['initial', index];
    if (keys.length !== 1) {
      add('initial-value', at, `initial[${index}] needs exactly one value[x]`, where);
      return;
    }
    const key = keys[0]!;
    if (key !== expected) {
      add('initial-value', at, `is of type ${at.type}: initial[${index}] holds ${key}, not ${expected}`, [
        ...where,
        key,
      ]);
      return;
    }
    const syntax = syntaxProblem(key, value[key]);
    if (syntax) add('initial-value', at, `initial[${index}].${key} ${syntax}`, [...where, key]);
  });
};
