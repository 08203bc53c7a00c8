/**
 * The answer checks of the form engine (issue 32; docs/interface.md §4.4 $validate "required
 * fields, value types, constraints"): one set of rules for $validate and for the editor, on the
 * server and, field by field, in the browser. Each rule is a named function over an explicit
 * context; the lists below are the order they run in.
 *
 * - Items: `required` where the item is enabled (enablement.ts); no answers on a disabled item;
 *   one answer unless the item repeats; none on an item of the abstract type `question`;
 *   questionnaire-minOccurs/maxOccurs on the answers of a question and the instances of a
 *   repeating group; an answer of a questionnaire-optionExclusive option stands alone (issue 35).
 * - Answers: an object with exactly one value[x] of the item's type (valueString too for
 *   `optionsOrString`), valid syntax; then answerOption / answerValueSet membership by
 *   answerConstraint, maxLength and the core extensions minLength, regex (RE2, budgeted), minValue,
 *   maxValue, maxDecimalPlaces, the unit of a quantity (questionnaire-unit / unitOption /
 *   unitValueSet), sdc-questionnaire-minQuantity/maxQuantity compared across UCUM units
 *   (units.ts), and an attachment's mimeType and maxSize (issue 35). Reference and URI syntax
 *   are the shape rules' (values.ts `syntaxProblem`).
 * - Invariants: `questionnaire-constraint` FHIRPath on each enabled item and on the response.
 *
 * A rule's finding has a `message` for the person at the field and `diagnostics` naming the item
 * for an API client.
 */

import { matchesWhole } from '../regex.js';
import { runWithinBudget } from '../run-within-budget.js';
import {
  type EngineContext,
  type EngineProblem,
  evaluateItemExpression,
  evaluateRootExpression,
  report,
} from './context.js';
import type { ItemDefinition } from './definition.js';
import { enabledAt, hasAnswers, isEnabled } from './enablement.js';
import {
  arrayOf,
  EXT_ANSWER_EXPRESSION,
  EXT_MAX_DECIMAL_PLACES,
  EXT_MAX_OCCURS,
  EXT_MAX_QUANTITY,
  EXT_MAX_SIZE,
  EXT_MAX_VALUE,
  EXT_MIME_TYPE,
  EXT_MIN_LENGTH,
  EXT_MIN_OCCURS,
  EXT_MIN_QUANTITY,
  EXT_MIN_VALUE,
  EXT_OPTION_EXCLUSIVE,
  EXT_QUESTIONNAIRE_CONSTRAINT,
  EXT_REGEX,
  EXT_UNIT_VALUE_SET,
  extensionsOf,
  extensionValue,
  isObject,
  unitOf,
  unitOptionsOf,
  unitText,
} from './extensions.js';
import { itemsOf, keyAt, type ResponseNode, type Scope } from './tree.js';
import { compareQuantities } from './units.js';
import {
  answerKeyOf,
  compareValues,
  decimalPlaces,
  describeValue,
  sameUnit,
  syntaxProblem,
  valueKeys,
} from './values.js';
import type { ValueSetMembers } from './valuesets.js';

/** What a rule found. */
export interface Finding {
  readonly code: string;
  readonly message: string;
  readonly diagnostics: string;
  readonly advisory?: boolean;
}

/** What an answer rule looks at. */
export interface AnswerCheck {
  readonly engine: EngineContext;
  readonly valueSets: ReadonlyMap<string, ValueSetMembers>;
  readonly def: ItemDefinition;
  readonly node: ResponseNode;
  readonly answer: Record<string, unknown>;
  /** The answer's value[x] key (`valueDecimal`); '' until the shape rules passed. */
  readonly key: string;
  readonly value: unknown;
  readonly path: string;
}

/** A rule on one answer: a finding, or undefined when the answer passes. */
export type AnswerRule = (check: AnswerCheck) => Finding | undefined;

/** A rule on one item instance. */
export type NodeRule = (
  engine: EngineContext,
  node: ResponseNode,
) => (Finding & { expression?: string }) | undefined;

const finding = (
  def: ItemDefinition,
  code: string,
  message: string,
  detail: string,
  advisory = false,
): Finding => ({
  code,
  message,
  diagnostics: `${def.label}: ${detail}`,
  ...(advisory ? { advisory } : {}),
});

// ------------------------------------------------------------------------------ item rules

/** Answers on a disabled item (enableWhen) are refused: they would not be part of the report. */
export const answeredWhileDisabled: NodeRule = (engine, node) =>
  node.answers.length > 0 && !isEnabled(engine, node)
    ? {
        code: 'business-rule',
        message: 'This question does not apply to the answers given, but it has an answer.',
        diagnostics: `${node.def.label} is answered although it is disabled (enableWhen)`,
      }
    : undefined;

/** A non-repeating question takes one answer. */
export const singleAnswer: NodeRule = (_engine, node) =>
  node.answers.length > 1 && node.def.item.repeats !== true
    ? {
        code: 'structure',
        message: 'Give one answer only.',
        diagnostics: `${node.def.label} does not repeat but has ${node.answers.length} answers`,
        expression: `${node.path}.answer[1]`,
      }
    : undefined;

/** `question` is an abstract item type (R5 item-type): such an item is a heading, never answered. */
export const abstractQuestion: NodeRule = (_engine, node) =>
  node.def.type === 'question' && node.answers.length > 0
    ? {
        code: 'structure',
        message: 'This item cannot be answered.',
        diagnostics: `${node.def.label} is of the abstract type question, which takes no answers`,
        expression: `${node.path}.answer[0]`,
      }
    : undefined;

/** A whole-number extension of an item (minOccurs, maxOccurs…). */
const countOf = (def: ItemDefinition, url: string): number | undefined => {
  const value = extensionValue(def.item, url)?.[1];
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
};

/**
 * questionnaire-minOccurs/maxOccurs on a question's answers; minOccurs applies to an enabled item
 * the response holds (one it leaves out is `required`'s business).
 */
export const occursOfAnswers: NodeRule = (engine, node) => {
  const count = node.answers.length;
  const min = countOf(node.def, EXT_MIN_OCCURS);
  const max = countOf(node.def, EXT_MAX_OCCURS);
  if (max !== undefined && count > max)
    return {
      code: 'structure',
      message: `Give at most ${max} answer${max === 1 ? '' : 's'}.`,
      diagnostics: `${node.def.label} has ${count} answers, more than maxOccurs ${max}`,
      expression: `${node.path}.answer[${max}]`,
    };
  if (min !== undefined && count < min && isEnabled(engine, node))
    return {
      code: 'structure',
      message: `Give at least ${min} answers.`,
      diagnostics: `${node.def.label} has ${count} answer${count === 1 ? '' : 's'}, fewer than minOccurs ${min}`,
    };
  return undefined;
};

/** The answerOption an answer chose (by value), if any. */
const chosenOption = (
  engine: EngineContext,
  def: ItemDefinition,
  answer: unknown,
): Record<string, unknown> | undefined => {
  if (!isObject(answer)) return undefined;
  const key = valueKeys(answer, 'value')[0];
  if (key === undefined) return undefined;
  return optionsOf(def, engine).find((o) => {
    const own = valueKeys(o, 'value')[0];
    return own !== undefined && compareValues(key, answer[key], own, o[own]) === 0;
  });
};

/** An answer of an option marked questionnaire-optionExclusive cannot be combined with others. */
export const optionExclusive: NodeRule = (engine, node) => {
  if (node.answers.length < 2) return undefined;
  const index = node.answers.findIndex((answer) => {
    const option = chosenOption(engine, node.def, answer);
    return option !== undefined && extensionValue(option, EXT_OPTION_EXCLUSIVE)?.[1] === true;
  });
  if (index < 0) return undefined;
  const answer = node.answers[index] as Record<string, unknown>;
  const key = valueKeys(answer, 'value')[0]!;
  return {
    code: 'business-rule',
    message: `${describeValue(key, answer[key])} cannot be combined with other answers.`,
    diagnostics: `${node.def.label}: option ${describeValue(key, answer[key])} is exclusive (questionnaire-optionExclusive) but the item has ${node.answers.length} answers`,
    expression: `${node.path}.answer[${index}]`,
  };
};

/** The rules on each question instance, in order. */
export const NODE_RULES: readonly NodeRule[] = [
  answeredWhileDisabled,
  singleAnswer,
  abstractQuestion,
  occursOfAnswers,
  optionExclusive,
];

// ---------------------------------------------------------------------------- answer shape

/** The rules on an answer's shape; the first that fails ends the answer's checks. */
const answerShape = (check: AnswerCheck): Finding | { key: string; value: unknown } => {
  const { def, answer } = check;
  const keys = valueKeys(answer, 'value');
  if (keys.length !== 1)
    return keys.length
      ? finding(
          def,
          'structure',
          'This answer holds more than one value.',
          `an answer holds exactly one value, not ${keys.join(', ')}`,
        )
      : finding(def, 'required', 'This answer has no value.', 'the answer has no value');
  const key = keys[0]!;
  const value = answer[key];
  const expected = answerKeyOf(def.type);
  const constrained =
    optionsOf(def).length > 0 || typeof def.item.answerValueSet === 'string' || computesOptions(def);
  const openChoice = constrained && def.item.answerConstraint === 'optionsOrString';
  if (expected && key !== expected && !(openChoice && key === 'valueString'))
    return {
      code: 'value',
      message: 'This answer is not of the kind this question takes.',
      diagnostics: `${def.label} is of type ${def.type}: its answers are ${expected}${openChoice ? ' or valueString' : ''}, not ${key}`,
    };
  const syntax = syntaxProblem(key, value);
  if (syntax) return finding(def, 'value', `This answer is not valid: it ${syntax}.`, `${key} ${syntax}`);
  return { key, value };
};

// ---------------------------------------------------------------------------- answer rules

/** An item whose permitted answers its answerExpression computes (SDC: only without answerOption/answerValueSet). */
const computesOptions = (def: ItemDefinition): boolean =>
  extensionsOf(def.item, EXT_ANSWER_EXPRESSION).length > 0 &&
  arrayOf(def.item.answerOption).length === 0 &&
  def.item.answerValueSet === undefined;

/**
 * The item's answer options: its answerOption, or — for an item with an answerExpression — the
 * options computed for this run (EngineOptions.computedOptions; SDC answerExpression, issue 35).
 */
const optionsOf = (def: ItemDefinition, engine?: EngineContext): Record<string, unknown>[] =>
  engine && computesOptions(def)
    ? [...(engine.options.computedOptions?.get(def.linkId) ?? [])]
    : arrayOf<unknown>(def.item.answerOption).filter(isObject);

/**
 * With answerConstraint optionsOnly (the default), a value must be one of the answerOptions — or
 * of the options its answerExpression computed (issue 35; an item whose expression could not be
 * computed is not checked, and says so).
 */
export const answerOption: AnswerRule = ({ engine, def, key, value }) => {
  const computed = computesOptions(def);
  const options = optionsOf(def, engine);
  const constraint = def.item.answerConstraint ?? 'optionsOnly';
  if (computed && !engine.options.computedOptions?.has(def.linkId)) {
    if (constraint === 'optionsOrType' || (constraint === 'optionsOrString' && key === 'valueString'))
      return undefined;
    const why = engine.options.computedUnavailable?.get(def.linkId) ?? 'it was not evaluated';
    return finding(
      def,
      'not-found',
      'The list of answers could not be computed, so this answer was not checked against it.',
      `the answerExpression could not be computed (${why}), so ${describeValue(key, value)} was not checked against it`,
      true,
    );
  }
  if (
    (options.length === 0 && !computed) ||
    constraint === 'optionsOrType' ||
    (constraint === 'optionsOrString' && key === 'valueString')
  )
    return undefined;
  const listed = options.some((o) => {
    const own = valueKeys(o, 'value')[0];
    return own !== undefined && compareValues(key, value, own, o[own]) === 0;
  });
  return listed
    ? undefined
    : finding(
        def,
        'code-invalid',
        'Choose one of the listed answers.',
        `${describeValue(key, value)} is not one of the ${computed ? 'answers its answerExpression permits' : 'answer options'}`,
      );
};

/** With answerConstraint optionsOnly, a coding must be in the answerValueSet (when it could be resolved). */
export const answerValueSet: AnswerRule = ({ def, key, value, valueSets }) => {
  const canonical = def.item.answerValueSet;
  const constraint = def.item.answerConstraint ?? 'optionsOnly';
  if (typeof canonical !== 'string' || optionsOf(def).length > 0) return undefined;
  if (constraint === 'optionsOrType' || (constraint === 'optionsOrString' && key === 'valueString'))
    return undefined;
  const members = valueSets.get(canonical);
  if (!members)
    return finding(
      def,
      'not-found',
      'The list of answers could not be loaded, so this answer was not checked against it.',
      `ValueSet ${canonical} could not be resolved, so membership of ${describeValue(key, value)} was not checked`,
      true,
    );
  if (key !== 'valueCoding' || !isObject(value)) return undefined;
  const found = members.codes.some(
    (c) =>
      c.code === value.code &&
      (c.system === undefined || value.system === undefined || c.system === value.system),
  );
  if (found) return undefined;
  return members.open
    ? finding(
        def,
        'code-invalid',
        'This answer is not in the list of answers.',
        `${describeValue(key, value)} is not listed in ValueSet ${canonical}, which includes codes it does not enumerate; membership was not verified`,
        true,
      )
    : finding(
        def,
        'code-invalid',
        'Choose one of the listed answers.',
        `${describeValue(key, value)} is not in ValueSet ${canonical}`,
      );
};

const textOf = ({ key, value }: AnswerCheck): string | undefined =>
  typeof value === 'string' && (key === 'valueString' || key === 'valueUri') ? value : undefined;

/** At most `maxLength` characters (R5 Questionnaire.item.maxLength). */
export const maxLength: AnswerRule = (check) => {
  const text = textOf(check);
  const max = check.def.item.maxLength;
  if (text === undefined || typeof max !== 'number') return undefined;
  const length = [...text].length;
  return length > max
    ? finding(
        check.def,
        'too-long',
        `Use at most ${max} characters (this answer has ${length}).`,
        `the answer has ${length} characters, more than maxLength ${max}`,
      )
    : undefined;
};

/** At least `minLength` characters (core extension). */
export const minLength: AnswerRule = (check) => {
  const text = textOf(check);
  const min = extensionValue(check.def.item, EXT_MIN_LENGTH)?.[1];
  if (text === undefined || typeof min !== 'number') return undefined;
  const length = [...text].length;
  return length < min
    ? finding(
        check.def,
        'value',
        `Use at least ${min} characters (this answer has ${length}).`,
        `the answer has ${length} characters, fewer than minLength ${min}`,
      )
    : undefined;
};

/**
 * The `regex` extension (R5 core; issue 10): the whole answer must match, on RE2 in linear time
 * and within the evaluation budget. A pattern RE2 cannot compile, or one that runs out of time,
 * is a warning that it was not applied; never an exception.
 */
export const regex: AnswerRule = (check) => {
  const text = textOf(check);
  const pattern = extensionValue(check.def.item, EXT_REGEX)?.[1];
  if (text === undefined || typeof pattern !== 'string') return undefined;
  let matched: boolean;
  try {
    matched = runWithinBudget(() => matchesWhole(pattern, text), check.engine.options.budget, pattern);
  } catch (error) {
    return finding(
      check.def,
      'processing',
      'The format of this answer could not be checked.',
      `the regex extension ${JSON.stringify(pattern)} was not applied: ${error instanceof Error ? error.message : String(error)}`,
      true,
    );
  }
  return matched
    ? undefined
    : finding(
        check.def,
        'value',
        'This answer does not have the expected format.',
        `${JSON.stringify(text)} does not match the pattern ${pattern}`,
      );
};

/** A limit as the person reads it: the value with the item's unit (`300 mm`). */
const limitText = (def: ItemDefinition, key: string, value: unknown): string => {
  if (typeof value === 'number') {
    const unit = unitText(unitOf(def.item));
    return unit ? `${value} ${unit}` : String(value);
  }
  return describeValue(key, value).replace(/^'(.*)'$/, '$1');
};

const bound =
  (url: string, side: 'min' | 'max'): AnswerRule =>
  ({ def, key, value }) => {
    const limit = extensionValue(def.item, url);
    if (!limit) return undefined;
    const cmp = compareValues(key, value, limit[0], limit[1]);
    if (typeof cmp !== 'number' || (side === 'min' ? cmp >= 0 : cmp <= 0)) return undefined;
    return finding(
      def,
      'value',
      `The value must be ${side === 'min' ? 'at least' : 'at most'} ${limitText(def, limit[0], limit[1])}.`,
      `${describeValue(key, value)} is ${side === 'min' ? 'below the minimum' : 'above the maximum'} ${describeValue(limit[0], limit[1])}`,
    );
  };

/** Not below the `minValue` extension (numbers, dates, times; quantities in the same unit). */
export const minValue: AnswerRule = bound(EXT_MIN_VALUE, 'min');
/** Not above the `maxValue` extension. */
export const maxValue: AnswerRule = bound(EXT_MAX_VALUE, 'max');

/** At most `maxDecimalPlaces` decimals, for decimal and quantity answers. */
export const maxDecimalPlaces: AnswerRule = ({ def, key, value }) => {
  const places = extensionValue(def.item, EXT_MAX_DECIMAL_PLACES)?.[1];
  const number =
    key === 'valueDecimal' ? value : key === 'valueQuantity' && isObject(value) ? value.value : undefined;
  if (typeof places !== 'number' || typeof number !== 'number' || decimalPlaces(number) <= places)
    return undefined;
  return finding(
    def,
    'value',
    places === 0 ? 'Use a whole number.' : `Use at most ${places} decimal place${places === 1 ? '' : 's'}.`,
    `${number} has more than ${places} decimal places`,
  );
};

/**
 * A quantity's unit is one the item offers: its questionnaire-unitOption units, or its
 * questionnaire-unit (compared by system and code, else by unit text).
 */
export const quantityUnit: AnswerRule = ({ def, key, value }) => {
  if (key !== 'valueQuantity' || !isObject(value)) return undefined;
  const options = unitOptionsOf(def.item);
  const single = unitOf(def.item);
  const allowed = options.length > 0 ? options : single ? [single] : [];
  if (allowed.length === 0) return undefined;
  const given = { ...value, ...(value.code === undefined && value.unit === undefined ? { unit: '' } : {}) };
  const ok = allowed.some((u) =>
    sameUnit(given, { system: u.system, code: u.code, unit: u.display ?? u.code } as Record<string, unknown>),
  );
  return ok
    ? undefined
    : finding(
        def,
        'value',
        `Choose one of the units ${allowed.map(unitText).join(', ')}.`,
        `the unit ${JSON.stringify(String(value.unit ?? value.code ?? ''))} is not one of the item's units (${allowed.map(unitText).join(', ')})`,
      );
};

/**
 * A quantity's unit is in the item's questionnaire-unitValueSet (by system and code); when the
 * ValueSet could not be resolved, a warning that it was not checked.
 */
export const unitValueSet: AnswerRule = ({ def, key, value, valueSets }) => {
  const canonical = extensionValue(def.item, EXT_UNIT_VALUE_SET)?.[1];
  if (key !== 'valueQuantity' || !isObject(value) || typeof canonical !== 'string') return undefined;
  const members = valueSets.get(canonical);
  const unit = String(value.code ?? value.unit ?? '');
  if (!members)
    return finding(
      def,
      'not-found',
      'The list of units could not be loaded, so the unit was not checked against it.',
      `ValueSet ${canonical} (questionnaire-unitValueSet) could not be resolved, so the unit ${JSON.stringify(unit)} was not checked`,
      true,
    );
  const found = members.codes.some(
    (c) =>
      c.code === value.code &&
      (c.system === undefined || value.system === undefined || c.system === value.system),
  );
  if (found || (members.open && value.code !== undefined)) return undefined;
  return finding(
    def,
    'code-invalid',
    'Choose one of the listed units.',
    `the unit ${JSON.stringify(unit)} is not in ValueSet ${canonical} (questionnaire-unitValueSet)`,
  );
};

const quantityBound =
  (url: string, side: 'min' | 'max'): AnswerRule =>
  ({ def, key, value }) => {
    const limit = extensionValue(def.item, url);
    if (key !== 'valueQuantity' || !limit || !isObject(limit[1])) return undefined;
    const cmp = compareQuantities(value, limit[1]);
    const name = side === 'min' ? 'sdc-questionnaire-minQuantity' : 'sdc-questionnaire-maxQuantity';
    // An answer in a foreign unit is reported once, by the minimum when both limits are foreign.
    const minimum = side === 'max' ? extensionValue(def.item, EXT_MIN_QUANTITY)?.[1] : undefined;
    if (cmp === undefined && minimum !== undefined && compareQuantities(value, minimum) === undefined)
      return undefined;
    if (cmp === undefined)
      return finding(
        def,
        'value',
        `This quantity cannot be compared with the ${side === 'min' ? 'minimum' : 'maximum'} ${describeValue('valueQuantity', limit[1])}: use a unit of the same kind.`,
        `${describeValue(key, value)} cannot be compared with the ${name} ${describeValue('valueQuantity', limit[1])}: their units are not both UCUM units of one dimension`,
      );
    if (side === 'min' ? cmp >= 0 : cmp <= 0) return undefined;
    return finding(
      def,
      'value',
      `The value must be ${side === 'min' ? 'at least' : 'at most'} ${describeValue('valueQuantity', limit[1])}.`,
      `${describeValue(key, value)} is ${side === 'min' ? 'below' : 'above'} the ${name} ${describeValue('valueQuantity', limit[1])}`,
    );
  };

/** Not below sdc-questionnaire-minQuantity, compared across UCUM units (5 mm < 1 cm). */
export const minQuantity: AnswerRule = quantityBound(EXT_MIN_QUANTITY, 'min');
/** Not above sdc-questionnaire-maxQuantity, compared across UCUM units. */
export const maxQuantity: AnswerRule = quantityBound(EXT_MAX_QUANTITY, 'max');

/** The size in bytes of an attachment: its `size` (R5 integer64, a string in JSON), else its base64 data's. */
const attachmentSize = (attachment: Record<string, unknown>): number | undefined => {
  const size = attachment.size;
  if (typeof size === 'number' && Number.isFinite(size)) return size;
  if (typeof size === 'string' && /^\d+$/.test(size)) return Number(size);
  if (typeof attachment.data !== 'string') return undefined;
  const padding = attachment.data.endsWith('==') ? 2 : attachment.data.endsWith('=') ? 1 : 0;
  return (attachment.data.length / 4) * 3 - padding;
};

/** An attachment's contentType is one of the item's mimeType extensions (type/subtype, parameters ignored). */
export const attachmentMimeType: AnswerRule = ({ def, key, value }) => {
  if (key !== 'valueAttachment' || !isObject(value)) return undefined;
  const allowed = extensionsOf(def.item, EXT_MIME_TYPE)
    .map(({ ext }) => ext.valueCode)
    .filter((v): v is string => typeof v === 'string');
  if (allowed.length === 0) return undefined;
  const base = (type: string) => type.split(';')[0]!.trim().toLowerCase();
  const given = typeof value.contentType === 'string' ? base(value.contentType) : undefined;
  if (given !== undefined && allowed.some((a) => base(a) === given)) return undefined;
  return finding(
    def,
    'value',
    `Attach a file of type ${allowed.join(', ')}.`,
    `the attachment's contentType ${JSON.stringify(value.contentType ?? null)} is not one of the item's mimeType ${allowed.join(', ')}`,
  );
};

/** An attachment is no larger than the item's maxSize (bytes). */
export const attachmentMaxSize: AnswerRule = ({ def, key, value }) => {
  const max = extensionValue(def.item, EXT_MAX_SIZE)?.[1];
  if (key !== 'valueAttachment' || !isObject(value) || typeof max !== 'number') return undefined;
  const size = attachmentSize(value);
  if (size === undefined || size <= max) return undefined;
  return finding(
    def,
    'too-long',
    `Attach a file of at most ${max} bytes (this one has ${size}).`,
    `the attachment has ${size} bytes, more than maxSize ${max}`,
  );
};

/** The rules on an answer of the right shape, in order; all run. */
export const ANSWER_RULES: readonly AnswerRule[] = [
  answerOption,
  answerValueSet,
  maxLength,
  minLength,
  regex,
  minValue,
  maxValue,
  maxDecimalPlaces,
  quantityUnit,
  unitValueSet,
  minQuantity,
  maxQuantity,
  attachmentMimeType,
  attachmentMaxSize,
];

// -------------------------------------------------------------------------------- running

const problemOf = (f: Finding, def: ItemDefinition, expression: string, key: string): EngineProblem => ({
  ...f,
  expression,
  linkId: def.linkId,
  key,
});

/**
 * Checks one answer (shape, then {@link ANSWER_RULES}).
 * @returns the problems found, with `expression` the answer's path.
 */
export const checkAnswer = (
  engine: EngineContext,
  valueSets: ReadonlyMap<string, ValueSetMembers>,
  node: ResponseNode,
  answer: unknown,
  path: string,
): EngineProblem[] => {
  const { def } = node;
  if (!isObject(answer))
    return [
      problemOf(
        finding(def, 'structure', 'This answer is not valid.', 'answer must be an object'),
        def,
        path,
        node.key,
      ),
    ];
  const base: AnswerCheck = { engine, valueSets, def, node, answer, key: '', value: undefined, path };
  const shape = answerShape(base);
  if ('code' in shape) return [problemOf(shape, def, path, node.key)];
  const check: AnswerCheck = { ...base, key: shape.key, value: shape.value };
  return ANSWER_RULES.flatMap((rule) => {
    const f = rule(check);
    return f ? [problemOf(f, def, path, node.key)] : [];
  });
};

/** Required items of one scope: missing ones at the scope, empty enabled ones at the item. */
const checkRequired = (engine: EngineContext, scope: Scope): void => {
  for (const def of itemsOf(engine.form, scope)) {
    if (def.item.required !== true || def.type === 'display') continue;
    const instances = scope.nodes.filter((n) => n.def === def);
    if (instances.length === 0) {
      if (enabledAt(engine, def, scope))
        report(engine, {
          code: 'required',
          message: 'An answer is required.',
          diagnostics: `${def.label} is required but missing from ${scope.owner ? (scope.owner.def.type === 'group' ? `group ${scope.owner.def.label}` : `answer ${scope.owner.scopes.indexOf(scope)} of ${scope.owner.def.label}`) : 'the response'}`,
          expression: scope.path,
          linkId: def.linkId,
          key: keyAt(scope, def),
        });
      continue;
    }
    for (const node of instances)
      if (isEnabled(engine, node) && !hasAnswers(node))
        report(engine, {
          code: 'required',
          message: 'An answer is required.',
          diagnostics:
            def.type === 'group'
              ? `group ${def.label} is required but none of its questions is answered`
              : `${def.label} is required but has no answer`,
          expression: node.path,
          linkId: def.linkId,
          key: node.key,
        });
  }
};

/**
 * Runs every check over the response (after enablement and calculations): required items, the
 * node rules, each answer, the invariants.
 * @param valueSets the members of the answerValueSets that could be resolved (valuesets.ts).
 */
export const checkResponse = (
  engine: EngineContext,
  valueSets: ReadonlyMap<string, ValueSetMembers>,
): void => {
  checkScope(engine, valueSets, engine.tree.root);
  checkInvariants(engine, undefined);
};

/**
 * questionnaire-minOccurs/maxOccurs on the instances of a repeating group in one scope (minOccurs
 * once the group has an instance: a missing group is `required`'s business).
 */
const checkGroupOccurs = (engine: EngineContext, scope: Scope): void => {
  for (const def of itemsOf(engine.form, scope)) {
    if (def.type !== 'group') continue;
    const instances = scope.nodes.filter((n) => n.def === def && isEnabled(engine, n));
    const min = countOf(def, EXT_MIN_OCCURS);
    const max = countOf(def, EXT_MAX_OCCURS);
    const count = instances.length;
    const problem =
      max !== undefined && count > max
        ? { message: `Add at most ${max}.`, detail: `more than maxOccurs ${max}`, at: instances[max]!.path }
        : min !== undefined && count > 0 && count < min
          ? { message: `Add at least ${min}.`, detail: `fewer than minOccurs ${min}`, at: scope.path }
          : undefined;
    if (problem)
      report(engine, {
        code: 'structure',
        message: problem.message,
        diagnostics: `group ${def.label} has ${count} instance${count === 1 ? '' : 's'}, ${problem.detail}`,
        expression: problem.at,
        linkId: def.linkId,
        key: keyAt(scope, def),
      });
  }
};

const checkScope = (
  engine: EngineContext,
  valueSets: ReadonlyMap<string, ValueSetMembers>,
  scope: Scope,
): void => {
  checkRequired(engine, scope);
  checkGroupOccurs(engine, scope);
  for (const node of scope.nodes) checkNode(engine, valueSets, node);
};

const checkNode = (
  engine: EngineContext,
  valueSets: ReadonlyMap<string, ValueSetMembers>,
  node: ResponseNode,
): void => {
  checkInvariants(engine, node);
  if (node.def.type === 'group') {
    for (const scope of node.scopes) checkScope(engine, valueSets, scope);
    return;
  }
  if (node.def.type === 'display') return;
  for (const rule of NODE_RULES) {
    const f = rule(engine, node);
    if (f) report(engine, problemOf(f, node.def, f.expression ?? node.path, node.key));
  }
  node.answers.forEach((answer, k) => {
    for (const problem of checkAnswer(engine, valueSets, node, answer, `${node.path}.answer[${k}]`))
      report(engine, problem);
    const scope = node.scopes[k];
    if (scope) checkScope(engine, valueSets, scope);
  });
};

// ----------------------------------------------------------------------------- invariants

/** One questionnaire-constraint extension. */
interface Constraint {
  readonly key: string | undefined;
  readonly severity: string | undefined;
  readonly expression: string | undefined;
  readonly human: string | undefined;
}

/**
 * The questionnaire-constraint extensions of a Questionnaire or an item. `expression` is a FHIRPath
 * string (`valueString`); a `valueExpression` with FHIRPath is accepted too. `requirements` is
 * documentation and `location` is not used: an issue points at the item the constraint is on.
 */
const constraintsOf = (owner: { extension?: unknown }): Constraint[] =>
  arrayOf<unknown>(owner.extension)
    .filter((e): e is Record<string, unknown> => isObject(e) && e.url === EXT_QUESTIONNAIRE_CONSTRAINT)
    .map((e) => {
      const part = (url: string): unknown => {
        const sub = arrayOf<unknown>(e.extension).find((x) => isObject(x) && x.url === url);
        const key = isObject(sub) ? Object.keys(sub).find((k) => k.startsWith('value')) : undefined;
        return key ? (sub as Record<string, unknown>)[key] : undefined;
      };
      const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);
      const expression = part('expression');
      return {
        key: text(part('key')),
        severity: text(part('severity')),
        expression: text(isObject(expression) ? expression.expression : expression),
        human: text(part('human')),
      };
    });

/**
 * The questionnaire-constraint invariants of an item instance (or of the Questionnaire): only a
 * result of exactly `false` violates one (an empty result is unknown: a missing answer is
 * `required`'s business). A violation is an `invariant` problem with the `human` text; severity
 * `warning` makes it advisory. An expression that is missing, fails, runs out of budget or answers
 * something else than one boolean is an advisory `processing` problem, once per constraint.
 * A disabled item's invariants do not apply.
 */
const checkInvariants = (engine: EngineContext, node: ResponseNode | undefined): void => {
  const owner = node ? node.def.item : engine.form.questionnaire;
  const constraints = constraintsOf(owner);
  if (constraints.length === 0 || (node && !isEnabled(engine, node))) return;
  const where = node ? node.def.label : 'the response';
  const path = node?.path ?? 'QuestionnaireResponse';
  for (const [index, constraint] of constraints.entries()) {
    const name = `the questionnaire-constraint ${constraint.key ? JSON.stringify(constraint.key) : '(without key)'} of ${where}`;
    const once = `constraint:${node?.def.linkId ?? ''}:${index}`;
    if (engine.reportedOnce.has(once)) continue;
    const notChecked = (why: string) =>
      report(
        engine,
        {
          code: 'processing',
          advisory: true,
          message: 'A rule of this form could not be checked.',
          diagnostics: `${name} was not checked: ${why}`,
          expression: path,
          ...(node ? { linkId: node.def.linkId, key: node.key } : {}),
        },
        once,
      );
    if (constraint.expression === undefined) {
      notChecked('it has no FHIRPath expression');
      continue;
    }
    let result: unknown[];
    try {
      result = (
        node
          ? evaluateItemExpression(engine, node.def, node.scope, node, constraint.expression)
          : evaluateRootExpression(engine, constraint.expression)
      ).map((r) => r.value);
    } catch (error) {
      notChecked(
        `its expression could not be evaluated (${error instanceof Error ? error.message : String(error)})`,
      );
      continue;
    }
    if (result.length === 0 || (result.length === 1 && result[0] === true)) continue;
    if (result.length !== 1 || result[0] !== false) {
      notChecked(`its expression answered ${JSON.stringify(result).slice(0, 200)}, not one boolean`);
      continue;
    }
    report(engine, {
      code: 'invariant',
      ...(constraint.severity === 'warning' ? { advisory: true } : {}),
      message: constraint.human ?? 'This answer breaks a rule of the form.',
      diagnostics: constraint.human ?? `${name} is not satisfied: ${constraint.expression} is false`,
      expression: path,
      ...(node ? { linkId: node.def.linkId, key: node.key } : {}),
    });
  }
};
