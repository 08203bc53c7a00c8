/**
 * FHIR R5's numeric primitives (datatypes.html: integer, unsignedInt, positiveInt, integer64,
 * decimal) and the check of every typed primitive a stored resource carries in a choice element
 * (`valueInteger`, `answerDate`…). One implementation: the resource parser (src/fhir/resources.ts)
 * and the SDC validator (src/sdc/validate.ts) both ask here. Dates and times are src/fhir/dates.ts.
 *
 * What JSON itself cannot carry — a number beyond a double (`1e400`, which would be stored as
 * `null`), an integer literal a double rounds (2^53 + 1) — is refused earlier, while the body is
 * parsed (src/http/edge/json-numbers.ts).
 */
import { isFhirDate, isFhirDateTime, isFhirInstant, isFhirTime } from './dates.js';

/** FHIR `integer` is a signed 32-bit integer. */
export const MIN_FHIR_INTEGER = -2_147_483_648;
export const MAX_FHIR_INTEGER = 2_147_483_647;

/** FHIR `integer64` is a signed 64-bit integer, written in JSON as a string. */
const MIN_INTEGER64 = -(2n ** 63n);
const MAX_INTEGER64 = 2n ** 63n - 1n;
const INTEGER64 = /^(?:0|[-+]?[1-9][0-9]{0,18})$/;

/** FHIR `integer`: a JSON number that is an integer of 32 bits. */
export const isFhirInteger = (value: unknown): value is number =>
  Number.isInteger(value) && (value as number) >= MIN_FHIR_INTEGER && (value as number) <= MAX_FHIR_INTEGER;

/** FHIR `integer64` (R5): a JSON string holding a signed 64-bit integer. */
export const isFhirInteger64 = (value: unknown): value is string => {
  if (typeof value !== 'string' || !INTEGER64.test(value)) return false;
  const n = BigInt(value);
  return n >= MIN_INTEGER64 && n <= MAX_INTEGER64;
};

/** FHIR `decimal`: a finite JSON number. */
export const isFhirDecimal = (value: unknown): value is number =>
  typeof value === 'number' && Number.isFinite(value);

/** What FHIR calls a primitive of this name, as a check of its JSON value; undefined for other types. */
const PRIMITIVE_CHECKS: ReadonlyMap<
  string,
  { readonly check: (v: unknown) => boolean; readonly rule: string }
> = new Map([
  ['Integer', { check: isFhirInteger, rule: 'a 32-bit integer (-2147483648 to 2147483647)' }],
  [
    'UnsignedInt',
    { check: (v: unknown) => isFhirInteger(v) && v >= 0, rule: 'an integer from 0 to 2147483647' },
  ],
  [
    'PositiveInt',
    { check: (v: unknown) => isFhirInteger(v) && v >= 1, rule: 'an integer from 1 to 2147483647' },
  ],
  ['Integer64', { check: isFhirInteger64, rule: 'a 64-bit integer written as a JSON string' }],
  ['Decimal', { check: isFhirDecimal, rule: 'a finite decimal number' }],
  [
    'Date',
    { check: isFhirDate, rule: 'a FHIR date (YYYY, YYYY-MM or YYYY-MM-DD, a real day from year 0001)' },
  ],
  [
    'DateTime',
    {
      check: isFhirDateTime,
      rule: 'a FHIR dateTime (a date, or YYYY-MM-DDThh:mm:ss with a time zone; a real day from year 0001)',
    },
  ],
  [
    'Instant',
    { check: isFhirInstant, rule: 'a FHIR instant (YYYY-MM-DDThh:mm:ss with a time zone, from year 0001)' },
  ],
  ['Time', { check: isFhirTime, rule: 'a FHIR time (hh:mm:ss)' }],
]);

/** A choice element whose name says its primitive type: `valueInteger`, `answerDate`… */
const TYPED_CHOICE = /^(?:value|answer)([A-Z][A-Za-z0-9]*)$/;

/**
 * The rule a typed choice element breaks, as a phrase ("a 32-bit integer …"), or undefined when
 * `value` is valid for the type `key` names (or `key` names no primitive checked here).
 * @param key the element's JSON name, e.g. `valueInteger`.
 */
export const typedPrimitiveProblem = (key: string, value: unknown): string | undefined => {
  const type = TYPED_CHOICE.exec(key)?.[1];
  const primitive = type === undefined ? undefined : PRIMITIVE_CHECKS.get(type);
  return primitive && !primitive.check(value) ? primitive.rule : undefined;
};

/** A typed choice element holding a value its type does not allow, and where it is. */
export interface PrimitiveViolation {
  /** The path to the element inside the resource: keys and array indexes. */
  readonly path: readonly (string | number)[];
  /** The rule it breaks, e.g. `a 32-bit integer (-2147483648 to 2147483647)`. */
  readonly rule: string;
}

/**
 * Every choice element of a resource (at any depth: answers, extensions, initial values,
 * enableWhen) whose name gives a FHIR primitive type — `valueInteger`, `valuePositiveInt`,
 * `valueInteger64`, `valueDecimal`, `valueDate`, `valueDateTime`, `valueInstant`, `valueTime`,
 * and their `answer…` twins — holding a value that type does not allow: 2^31 as an integer, a
 * JSON number as an integer64, year 0000 or 30 February as a date. Walked with an explicit stack.
 * @returns the violations in document order (at most `limit`).
 */
export const findPrimitiveViolations = (resource: unknown, limit = 20): PrimitiveViolation[] => {
  const found: PrimitiveViolation[] = [];
  const stack: { value: unknown; path: (string | number)[] }[] = [{ value: resource, path: [] }];
  while (stack.length > 0 && found.length < limit) {
    const { value, path } = stack.pop()!;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: [...path, i] });
    } else if (value !== null && typeof value === 'object') {
      const entries = Object.entries(value);
      const nested: { value: unknown; path: (string | number)[] }[] = [];
      for (const [key, member] of entries) {
        const rule = typedPrimitiveProblem(key, member);
        if (rule) found.push({ path: [...path, key], rule });
        else if (member !== null && typeof member === 'object')
          nested.push({ value: member, path: [...path, key] });
      }
      for (let i = nested.length - 1; i >= 0; i--) stack.push(nested[i]!);
    }
  }
  return found.slice(0, limit);
};
