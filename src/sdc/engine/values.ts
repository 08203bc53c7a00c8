/**
 * Answer values of the form engine (R5 QuestionnaireResponse.item.answer.value[x]): their keys,
 * syntax, comparison (for enableWhen, answerOption and minValue/maxValue) and how a value is named
 * in a diagnostic. Pure.
 */
import { isFhirDate, isFhirDateTime, isFhirTime } from '../../fhir/dates.js';
import { isFhirDecimal, isFhirInteger } from '../../fhir/primitives.js';
import { R5_RESOURCE_TYPES } from '../../fhir/r5-resource-types.js';
import type { QuestionnaireResponseAnswer } from '../types.js';
import { isObject } from './extensions.js';

/** The answer `value[x]` of each item type (R5 Questionnaire.item.type). */
export const ANSWER_VALUE_KEYS: Readonly<Record<string, string>> = {
  boolean: 'valueBoolean',
  decimal: 'valueDecimal',
  integer: 'valueInteger',
  date: 'valueDate',
  dateTime: 'valueDateTime',
  time: 'valueTime',
  string: 'valueString',
  text: 'valueString',
  url: 'valueUri',
  coding: 'valueCoding',
  quantity: 'valueQuantity',
  reference: 'valueReference',
  attachment: 'valueAttachment',
};

/** The expected answer key of an item type (Object.hasOwn: a type named `constructor` has none). */
export const answerKeyOf = (type: unknown): string | undefined =>
  typeof type === 'string' && Object.hasOwn(ANSWER_VALUE_KEYS, type) ? ANSWER_VALUE_KEYS[type] : undefined;

// FHIR primitive syntax (R5 datatypes): dates, numbers and times in src/fhir/ (one rule each).
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const MIME = /^[\w.+-]+\/[\w.+-]+(?:\s*;.*)?$/;

const UUID_URN = /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const OID_URN = /^urn:oid:[0-2](?:\.(?:0|[1-9]\d*))+$/;
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:/;
// R5 Reference.reference, relative form: Type/id, optionally /_history/version (R5 id syntax).
const RELATIVE_REFERENCE = /^([A-Za-z]+)\/[A-Za-z0-9\-.]{1,64}(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/**
 * Why `text` is not a valid FHIR uri (R5 datatypes: no whitespace; `urn:uuid:` takes a lowercase
 * RFC 4122 UUID, `urn:oid:` an OID); undefined when it is.
 */
export const uriProblem = (text: string): string | undefined => {
  if (text === '' || /\s/.test(text)) return 'must be a URI without whitespace';
  if (text.startsWith('urn:uuid:') && !UUID_URN.test(text))
    return 'must be urn:uuid: followed by a lowercase UUID (8-4-4-4-12 hex digits)';
  if (text.startsWith('urn:oid:') && !OID_URN.test(text)) return 'must be urn:oid: followed by an OID';
  return undefined;
};

/**
 * Why `text` is not a valid literal reference (R5 Reference.reference): `Type/id` with an R5
 * resource type, an absolute URI (URL, urn:uuid, urn:oid; a URL ending in `Type/id` names an R5
 * type too) or `#id` of a contained resource.
 */
export const referenceProblem = (text: string): string | undefined => {
  const uri = uriProblem(text);
  if (uri) return uri;
  if (text.startsWith('#') || text.startsWith('urn:')) return undefined;
  if (SCHEME.test(text)) {
    // An absolute RESTful URL ends in Type/id (or Type/id/_history/v): the type must be R5's.
    const rest = /\/([A-Z][A-Za-z]+)\/[A-Za-z0-9\-.]{1,64}(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/.exec(text);
    return rest && !R5_RESOURCE_TYPES.has(rest[1]!)
      ? `names ${rest[1]}, which is not an R5 resource type`
      : undefined;
  }
  const relative = RELATIVE_REFERENCE.exec(text);
  if (!relative) return 'must be Type/id, an absolute URL or #id';
  return R5_RESOURCE_TYPES.has(relative[1]!)
    ? undefined
    : `names ${relative[1]}, which is not an R5 resource type`;
};

/** The `value[x]` keys of an answer, enableWhen (`answer[x]`) or answerOption. */
export const valueKeys = (element: Record<string, unknown>, prefix: 'value' | 'answer'): string[] =>
  Object.keys(element).filter(
    (k) => k.startsWith(prefix) && k.length > prefix.length && /[A-Z]/.test(k[prefix.length]!),
  );

/** Why `value` is not valid syntax for the FHIR type behind `key` (valueDate, answerInteger…); undefined when it is. */
export const syntaxProblem = (key: string, value: unknown): string | undefined => {
  const type = key.replace(/^(value|answer)/, '');
  switch (type) {
    case 'Boolean':
      return typeof value === 'boolean' ? undefined : 'must be true or false';
    case 'Decimal':
      return isFhirDecimal(value) ? undefined : 'must be a decimal number';
    case 'Integer':
      return isFhirInteger(value) ? undefined : 'must be a 32-bit integer';
    case 'Date':
      return isFhirDate(value)
        ? undefined
        : 'must be a date YYYY, YYYY-MM or YYYY-MM-DD (a real day from year 0001)';
    case 'DateTime':
      return isFhirDateTime(value)
        ? undefined
        : 'must be a dateTime YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDThh:mm:ss with a time zone (a real day from year 0001)';
    case 'Time':
      return isFhirTime(value) ? undefined : 'must be a time hh:mm:ss';
    case 'String':
      return typeof value === 'string' && value.trim() !== '' ? undefined : 'must be a non-empty string';
    case 'Uri':
      return typeof value === 'string' ? uriProblem(value) : 'must be a URI without whitespace';
    case 'Coding':
      if (!isObject(value)) return 'must be a Coding object';
      for (const field of ['system', 'version', 'code', 'display'])
        if (value[field] !== undefined && (typeof value[field] !== 'string' || value[field] === ''))
          return `${field} must be a non-empty string`;
      if (typeof value.system === 'string' && uriProblem(value.system)) return 'system must be a URI';
      return value.code === undefined && value.display === undefined
        ? 'must have a code or a display'
        : undefined;
    case 'Quantity':
      if (!isObject(value)) return 'must be a Quantity object';
      if (typeof value.value !== 'number' || !Number.isFinite(value.value))
        return 'must have a numeric value';
      for (const field of ['unit', 'system', 'code', 'comparator'])
        if (value[field] !== undefined && typeof value[field] !== 'string')
          return `${field} must be a string`;
      return undefined;
    case 'Reference':
      if (!isObject(value)) return 'must be a Reference object';
      if (value.reference !== undefined && (typeof value.reference !== 'string' || value.reference === ''))
        return 'reference must be a non-empty string';
      if (typeof value.reference === 'string') {
        const problem = referenceProblem(value.reference);
        if (problem) return `reference ${problem}`;
      }
      return value.reference === undefined && value.identifier === undefined && value.display === undefined
        ? 'must have a reference, an identifier or a display'
        : undefined;
    case 'Attachment':
      if (!isObject(value)) return 'must be an Attachment object';
      if (
        value.contentType !== undefined &&
        (typeof value.contentType !== 'string' || !MIME.test(value.contentType))
      )
        return 'contentType must be a MIME type';
      if (value.data !== undefined && (typeof value.data !== 'string' || !BASE64.test(value.data)))
        return 'data must be base64';
      if (value.url !== undefined && (typeof value.url !== 'string' || uriProblem(value.url)))
        return 'url must be a URL';
      return value.data === undefined && value.url === undefined ? 'must have data or a url' : undefined;
    default:
      return undefined;
  }
};

/** Decimal places of a JSON number (`1.25` → 2, `1e-7` → 7); trailing zeros are lost by JSON.parse. */
export const decimalPlaces = (n: number): number => {
  const m = /^-?\d*(?:\.(\d+))?(?:e([+-]?\d+))?$/i.exec(String(n));
  if (!m) return 0;
  return Math.max(0, (m[1]?.length ?? 0) - (m[2] ? Number(m[2]) : 0));
};

/** Orders two dates/dateTimes: instants when both have a time, else by the shared date precision. */
const compareTemporal = (a: string, b: string): number => {
  if (a.includes('T') && b.includes('T')) return Math.sign(Date.parse(a) - Date.parse(b));
  const da = a.slice(0, 10);
  const db = b.slice(0, 10);
  const n = Math.min(da.length, db.length);
  return da.slice(0, n) < db.slice(0, n) ? -1 : da.slice(0, n) > db.slice(0, n) ? 1 : 0;
};

type Kind =
  | 'number'
  | 'temporal'
  | 'time'
  | 'string'
  | 'boolean'
  | 'coding'
  | 'quantity'
  | 'reference'
  | 'other';

const kindOf = (key: string): Kind => {
  switch (key.replace(/^(value|answer)/, '')) {
    case 'Integer':
    case 'Decimal':
      return 'number';
    case 'Date':
    case 'DateTime':
      return 'temporal';
    case 'Time':
      return 'time';
    case 'String':
    case 'Uri':
      return 'string';
    case 'Boolean':
      return 'boolean';
    case 'Coding':
      return 'coding';
    case 'Quantity':
      return 'quantity';
    case 'Reference':
      return 'reference';
    default:
      return 'other';
  }
};

/** Two Codings are the same answer: same code (and system, when both name one), or same display without codes. */
export const sameCoding = (a: Record<string, unknown>, b: Record<string, unknown>): boolean =>
  a.code !== undefined
    ? a.code === b.code && (a.system === undefined || b.system === undefined || a.system === b.system)
    : a.display !== undefined && a.display === b.display && b.code === undefined;

/** Two Quantities (or a Quantity and a unit Coding) are in the same unit: code and system, else unit text. */
export const sameUnit = (a: Record<string, unknown>, b: Record<string, unknown>): boolean =>
  (a.code === undefined && a.unit === undefined) ||
  (b.code === undefined && b.unit === undefined) ||
  (a.code !== undefined
    ? a.code === b.code && (a.system ?? b.system) === (b.system ?? a.system)
    : a.unit === b.unit);

/**
 * Compares two typed values: a number (<0, 0, >0), `'unequal'` for values that can only be tested
 * for equality, or undefined when they are not comparable (different types, units…).
 */
export const compareValues = (
  aKey: string,
  a: unknown,
  bKey: string,
  b: unknown,
): number | 'unequal' | undefined => {
  const kind = kindOf(aKey);
  if (kind !== kindOf(bKey)) return undefined;
  switch (kind) {
    case 'number':
      return typeof a === 'number' && typeof b === 'number' ? Math.sign(a - b) : undefined;
    case 'temporal':
      return typeof a === 'string' && typeof b === 'string' ? compareTemporal(a, b) : undefined;
    case 'time':
    case 'string':
      return typeof a === 'string' && typeof b === 'string' ? (a < b ? -1 : a > b ? 1 : 0) : undefined;
    case 'boolean':
      return a === b ? 0 : 'unequal';
    case 'coding':
      return isObject(a) && isObject(b) ? (sameCoding(a, b) ? 0 : 'unequal') : undefined;
    case 'quantity':
      return isObject(a) &&
        isObject(b) &&
        typeof a.value === 'number' &&
        typeof b.value === 'number' &&
        sameUnit(a, b)
        ? Math.sign(a.value - b.value)
        : undefined;
    case 'reference':
      return isObject(a) && isObject(b)
        ? a.reference === b.reference && a.reference
          ? 0
          : 'unequal'
        : undefined;
    default:
      return JSON.stringify(a) === JSON.stringify(b) ? 0 : 'unequal';
  }
};

/** The values of answers as `[value key, value]`, skipping malformed ones (none or several values). */
export const answerValues = (answers: readonly unknown[]): [string, unknown][] =>
  answers.flatMap((a) => {
    if (!isObject(a)) return [];
    const keys = valueKeys(a, 'value');
    return keys.length === 1 ? [[keys[0]!, a[keys[0]!]] as [string, unknown]] : [];
  });

/** The one `[value key, value]` of an answer, or undefined. */
export const answerValue = (
  answer: QuestionnaireResponseAnswer | undefined,
): [string, unknown] | undefined => (answer ? answerValues([answer])[0] : undefined);

/** A value for diagnostics: `'abc'`, `42`, `http://loinc.org|1234-5`, `5 mg`. */
export const describeValue = (key: string, value: unknown): string => {
  if (isObject(value)) {
    if (key.endsWith('Coding'))
      return [value.system, value.code].filter((x) => x !== undefined).join('|') || String(value.display);
    if (key.endsWith('Quantity'))
      return `${String(value.value)}${value.unit || value.code ? ` ${String(value.unit ?? value.code)}` : ''}`;
    if (key.endsWith('Reference')) return String(value.reference ?? value.display ?? 'reference');
    return JSON.stringify(value);
  }
  return typeof value === 'string' ? `'${value}'` : String(value);
};
