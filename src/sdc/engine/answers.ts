/**
 * Expression results as answers (SDC "Expressions": initial and calculated values take the item's
 * answer type, with FHIRPath's implicit conversions; a resource answers a Reference item):
 * $populate's initialExpression and the form engine's calculatedExpression convert through here.
 * Pure.
 */
import type { TypedValue } from '../fhirpath.js';
import type { Coding, Json, QuestionnaireItem, QuestionnaireResponseAnswer } from '../types.js';
import { arrayOf, isObject, unitOf } from './extensions.js';

const clone = <T>(value: T): T => structuredClone(value);

/** The `value[x]` element of an initial value, answer option or answer: `[key, value]`. */
export const valueXOf = (element: Record<string, unknown>): [string, unknown] | undefined => {
  const key = Object.keys(element).find((k) => k.startsWith('value') && k.length > 5);
  return key ? [key, element[key]] : undefined;
};

/** The broad kind of a FHIRPath result, from its type name (and its JavaScript value otherwise). */
type Kind =
  | 'boolean'
  | 'integer'
  | 'decimal'
  | 'string'
  | 'date'
  | 'dateTime'
  | 'time'
  | 'quantity'
  | 'Coding'
  | 'CodeableConcept'
  | 'Reference'
  | 'Attachment'
  | 'resource'
  | 'other';

const KINDS: Readonly<Record<string, Kind>> = {
  boolean: 'boolean',
  integer: 'integer',
  integer64: 'integer',
  positiveInt: 'integer',
  unsignedInt: 'integer',
  decimal: 'decimal',
  string: 'string',
  code: 'string',
  id: 'string',
  markdown: 'string',
  uri: 'string',
  url: 'string',
  canonical: 'string',
  oid: 'string',
  uuid: 'string',
  base64Binary: 'string',
  date: 'date',
  dateTime: 'dateTime',
  instant: 'dateTime',
  time: 'time',
  Boolean: 'boolean',
  Integer: 'integer',
  Long: 'integer',
  Decimal: 'decimal',
  String: 'string',
  Date: 'date',
  DateTime: 'dateTime',
  Time: 'time',
  Quantity: 'quantity',
  Age: 'quantity',
  Duration: 'quantity',
  Distance: 'quantity',
  Count: 'quantity',
  SimpleQuantity: 'quantity',
  MoneyQuantity: 'quantity',
  Coding: 'Coding',
  CodeableConcept: 'CodeableConcept',
  Reference: 'Reference',
  Attachment: 'Attachment',
};

const kindOfResult = (typed: TypedValue): Kind => {
  const name = typed.type.slice(typed.type.indexOf('.') + 1);
  if (Object.hasOwn(KINDS, name)) return KINDS[name]!;
  const value = typed.value;
  if (isObject(value) && typeof value.resourceType === 'string') return 'resource';
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'decimal';
  if (typeof value === 'string') return 'string';
  return 'other';
};

const PRIMITIVES: readonly Kind[] = ['boolean', 'integer', 'decimal', 'string', 'date', 'dateTime', 'time'];

const UCUM = 'http://unitsofmeasure.org';

/** FHIRPath calendar-duration units and their UCUM codes. */
const CALENDAR_UNITS: Readonly<Record<string, string>> = {
  year: 'a',
  month: 'mo',
  week: 'wk',
  day: 'd',
  hour: 'h',
  minute: 'min',
  second: 's',
  millisecond: 'ms',
};

/** `5 'mg'` / `3 years` (a resolved System.Quantity) as a FHIR Quantity. */
const quantityFromText = (text: string): Json | undefined => {
  const match = /^(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?:\s+(.+))?$/.exec(text.trim());
  if (!match) return undefined;
  const value = Number(match[1]);
  const unit = match[2];
  if (!unit) return { value };
  const quoted = /^'(.*)'$/.exec(unit);
  if (quoted) return { value, unit: quoted[1], system: UCUM, code: quoted[1] };
  const singular = unit.replace(/s$/, '');
  const calendar = Object.hasOwn(CALENDAR_UNITS, singular) ? CALENDAR_UNITS[singular] : undefined;
  return calendar ? { value, unit, system: UCUM, code: calendar } : { value, unit };
};

export const describeResult = (typed: TypedValue): string =>
  `${typed.type || typeof typed.value} ${JSON.stringify(typed.value)?.slice(0, 80) ?? ''}`.trim();

const article = (word: string) => `${/^[aeiou]/i.test(word) ? 'an' : 'a'} ${word}`;

const withSeconds = (time: string) => (/^\d{2}:\d{2}$/.test(time) ? `${time}:00` : time);

const sameCoding = (a: Coding, b: Coding): boolean =>
  a.code === b.code && (a.system === undefined || b.system === undefined || a.system === b.system);

/**
 * Converts one expression result to an answer of the item's type (SDC: initial/calculated values
 * take the item's answer type). Returns the answer's `[valueX, value]` or a reason it cannot.
 */
export const toAnswerValue = (item: QuestionnaireItem, typed: TypedValue): [string, unknown] | string => {
  const kind = kindOfResult(typed);
  const { value } = typed;
  const wrong = () => `${describeResult(typed)} cannot answer ${article(item.type)} item`;
  switch (item.type) {
    case 'boolean':
      return kind === 'boolean' ? ['valueBoolean', value] : wrong();
    case 'decimal':
      return (kind === 'decimal' || kind === 'integer') && typeof value === 'number'
        ? ['valueDecimal', value]
        : wrong();
    case 'integer':
      return (kind === 'integer' || kind === 'decimal') &&
        typeof value === 'number' &&
        Number.isInteger(value)
        ? ['valueInteger', value]
        : wrong();
    case 'date':
      if (kind === 'date' && typeof value === 'string') return ['valueDate', value];
      // A dateTime (e.g. now()) answers a date item with its date part.
      if (kind === 'dateTime' && typeof value === 'string') return ['valueDate', value.split('T')[0]];
      return wrong();
    case 'dateTime':
      if ((kind === 'date' || kind === 'dateTime') && typeof value === 'string')
        return ['valueDateTime', value.replace(/T(\d{2}:\d{2})(?=$|[Z+-])/, 'T$1:00')];
      return wrong();
    case 'time':
      return kind === 'time' && typeof value === 'string' ? ['valueTime', withSeconds(value)] : wrong();
    case 'string':
    case 'text':
      // Any primitive answers a text item as its string form (FHIRPath toString()).
      return PRIMITIVES.includes(kind) && value !== null && typeof value !== 'object'
        ? ['valueString', String(value)]
        : wrong();
    case 'url':
      return kind === 'string' && typeof value === 'string' ? ['valueUri', value] : wrong();
    case 'coding':
    case 'choice':
    case 'open-choice': {
      const options = arrayOf<Record<string, unknown>>(item.answerOption)
        .map((o) => (isObject(o) && isObject(o.valueCoding) ? (o.valueCoding as Coding) : undefined))
        .filter((c): c is Coding => c !== undefined);
      let coding: Coding | undefined;
      if (kind === 'Coding' && isObject(value)) coding = value as Coding;
      else if (kind === 'CodeableConcept' && isObject(value)) coding = arrayOf<Coding>(value.coding)[0];
      else if (kind === 'string' && typeof value === 'string') {
        coding = options.find((o) => o.code === value);
        if (!coding && item.answerConstraint === 'optionsOrString') return ['valueString', value];
        if (!coding) return `${describeResult(typed)} matches no answerOption code of the item`;
      }
      if (!coding || !isObject(coding)) return wrong();
      // The matching answer option's coding carries its display (and system when the result had none).
      return ['valueCoding', clone(options.find((o) => sameCoding(o, coding)) ?? coding)];
    }
    case 'quantity': {
      if (kind === 'quantity' && isObject(value)) return ['valueQuantity', value];
      if (kind === 'quantity' && typeof value === 'string') {
        const quantity = quantityFromText(value);
        return quantity ? ['valueQuantity', quantity] : wrong();
      }
      if ((kind === 'integer' || kind === 'decimal') && typeof value === 'number') {
        // A bare number takes the item's unit (questionnaire-unit), when it names one.
        const coding = unitOf(item);
        return [
          'valueQuantity',
          {
            value,
            ...(coding?.display || coding?.code ? { unit: coding.display ?? coding.code } : {}),
            ...(coding?.system ? { system: coding.system } : {}),
            ...(coding?.code ? { code: coding.code } : {}),
          },
        ];
      }
      return wrong();
    }
    case 'reference':
      if (kind === 'Reference' && isObject(value)) return ['valueReference', value];
      if (kind === 'resource' && isObject(value) && typeof value.id === 'string')
        return ['valueReference', { reference: `${value.resourceType}/${value.id}` }];
      if (
        kind === 'string' &&
        typeof value === 'string' &&
        /^[A-Z][A-Za-z]+\/[A-Za-z0-9\-.]{1,64}$/.test(value)
      )
        return ['valueReference', { reference: value }];
      return wrong();
    case 'attachment':
      return kind === 'Attachment' && isObject(value) ? ['valueAttachment', value] : wrong();
    default:
      return `${article(item.type)} item takes no answers`;
  }
};

/** Is the answer allowed by the item's answerOption list (R5 answerConstraint, default optionsOnly)? */
export const admittedByOptions = (item: QuestionnaireItem, [key, value]: [string, unknown]): boolean => {
  const options = arrayOf<Record<string, unknown>>(item.answerOption).filter(isObject);
  if (options.length === 0 || (item.answerConstraint ?? 'optionsOnly') !== 'optionsOnly') return true;
  return options.some((option) => {
    const own = valueXOf(option);
    if (!own || own[0] !== key) return false;
    if (key === 'valueCoding') return sameCoding(own[1] as Coding, value as Coding);
    if (key === 'valueReference')
      return (own[1] as { reference?: string }).reference === (value as { reference?: string }).reference;
    return JSON.stringify(own[1]) === JSON.stringify(value);
  });
};

/** Why one result could not become an answer: a message for the item's issue. */
export interface ConversionProblem {
  readonly code: 'value';
  readonly diagnostics: string;
}

/**
 * The answers of expression results for `item` (`what`: `initialExpression`, `calculatedExpression`):
 * each converted to the item's type ({@link toAnswerValue}) and admitted by its answerOptions; a
 * non-repeating item keeps the first. What does not fit is a problem, and left out.
 */
export const answersFromResults = (
  what: string,
  item: QuestionnaireItem,
  values: readonly TypedValue[],
): { answers: QuestionnaireResponseAnswer[]; problems: ConversionProblem[] } => {
  const answers: QuestionnaireResponseAnswer[] = [];
  const problems: ConversionProblem[] = [];
  for (const typed of values) {
    const converted = toAnswerValue(item, typed);
    if (typeof converted === 'string') {
      problems.push({
        code: 'value',
        diagnostics: `${what} of item '${item.linkId}': ${converted}; the value is ignored`,
      });
      continue;
    }
    if (!admittedByOptions(item, converted)) {
      problems.push({
        code: 'value',
        diagnostics: `${what} of item '${item.linkId}': ${describeResult(typed)} is not one of the item's answerOptions; the value is ignored`,
      });
      continue;
    }
    answers.push({ [converted[0]]: clone(converted[1]) });
  }
  if (!item.repeats && answers.length > 1) {
    problems.push({
      code: 'value',
      diagnostics: `${what} of item '${item.linkId}' gave ${answers.length} values but the item does not repeat; the first is used`,
    });
    return { answers: answers.slice(0, 1), problems };
  }
  return { answers, problems };
};
