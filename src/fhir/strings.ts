/**
 * FHIR's rule for strings (FHIR R5 datatypes §2.1.28.0.1 "string": "Strings SHALL NOT contain
 * Unicode character points below 32, except for u0009 (horizontal tab), u0010 (carriage return)
 * and u0013 (line feed)"), plus well-formed UTF-16: no lone surrogates, which neither UTF-8 nor
 * PostgreSQL can store (issue 10). casebook applies it to every string a client sends, FHIR or
 * not, so nothing reaches the event log that the read models cannot store.
 */

// Characters below U+0020 other than tab, LF and CR; a high surrogate not followed by a low one;
// a low surrogate not preceded by a high one. No nested quantifiers: linear time. Every match is
// one UTF-16 code unit (the lookarounds match nothing). Global for `replace`; used only through
// `search` and `replace`, which ignore and reset its lastIndex (never `test` or `exec`).
const FORBIDDEN =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
  /[\u0000-\u0008\u000B\u000C\u000E-\u001F]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Where a string breaks the rule, and why. */
export interface StringViolation {
  /** Offset (UTF-16 code units) of the first offending character. */
  readonly index: number;
  /** e.g. `control character U+0000`, `lone surrogate U+D800`. */
  readonly reason: string;
}

/** The first character of `value` that FHIR strings may not contain; undefined when it is valid. */
export const stringViolation = (value: string): StringViolation | undefined => {
  const index = value.search(FORBIDDEN);
  if (index < 0) return undefined;
  const code = value.charCodeAt(index);
  const hex = code.toString(16).toUpperCase().padStart(4, '0');
  return { index, reason: `${code < 0x20 ? 'control character' : 'lone surrogate'} U+${hex}` };
};

/** Is `value` a string FHIR allows (spec: FHIR R5 string)? */
export const isFhirString = (value: string): boolean => value.search(FORBIDDEN) < 0;

/** Replaces what the rule forbids by `\uXXXX`, so a path or message can quote a bad name safely. */
export const escapeForbidden = (value: string): string =>
  value.replace(FORBIDDEN, (c) => `\\u${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`);

/** A string inside a JSON value that breaks the rule. */
export interface JsonStringViolation extends StringViolation {
  /**
   * The element, in the edge's path syntax: `identifier[0].value`, prefixed with `root`
   * (`Patient.identifier[0].value`). For an offending object key, the path ends in that key,
   * escaped with {@link escapeForbidden}.
   */
  readonly path: string;
  /** true when the offending string is an object key (an element name), not a value. */
  readonly inKey: boolean;
}

const IDENTIFIER = /^[A-Za-z_$][\w$-]*$/;

const child = (path: string, key: string | number): string => {
  if (typeof key === 'number') return `${path}[${key}]`;
  const name = IDENTIFIER.test(key) ? key : JSON.stringify(escapeForbidden(key));
  return !path ? name : IDENTIFIER.test(key) ? `${path}.${name}` : `${path}[${name}]`;
};

/**
 * Finds the first string (value or object key) in a parsed JSON value that breaks the FHIR string
 * rule: depth first in document order, an object's keys before its values. Walks with an explicit stack, so any nesting depth is safe.
 * @param value a JSON value (objects, arrays, strings, numbers, booleans, null).
 * @param root the path of `value` itself, e.g. `Patient` for a Patient resource ('' for none).
 * @returns the first violation with its path, or undefined when every string is valid.
 */
export const findJsonStringViolation = (value: unknown, root = ''): JsonStringViolation | undefined => {
  // Each entry names its parent and key; the path is built only for the violation, not for every
  // element (building it for all made the walk of a 1 MB body take longer than its JSON.parse).
  interface Entry {
    readonly value: unknown;
    readonly parent: Entry | undefined;
    readonly key: string | number | undefined;
  }
  const pathOf = (entry: Entry | undefined, key?: string): string => {
    const keys: (string | number)[] = key === undefined ? [] : [key];
    for (let e = entry; e?.key !== undefined; e = e.parent) keys.push(e.key);
    return keys.reduceRight<string>((path, k) => child(path, k), root);
  };
  const stack: Entry[] = [{ value, parent: undefined, key: undefined }];
  while (stack.length > 0) {
    const entry = stack.pop()!;
    const current = entry.value;
    if (typeof current === 'string') {
      const violation = stringViolation(current);
      if (violation) return { ...violation, path: pathOf(entry), inKey: false };
    } else if (Array.isArray(current)) {
      for (let i = current.length - 1; i >= 0; i--) stack.push({ value: current[i], parent: entry, key: i });
    } else if (current !== null && typeof current === 'object') {
      const keys = Object.keys(current);
      for (const key of keys) {
        const violation = stringViolation(key);
        if (violation) return { ...violation, path: pathOf(entry, key), inKey: true };
      }
      for (let i = keys.length - 1; i >= 0; i--) {
        const key = keys[i]!;
        const member = (current as Record<string, unknown>)[key];
        // Numbers, booleans and null hold no string: not worth a stack entry.
        if (typeof member === 'string' || (member !== null && typeof member === 'object'))
          stack.push({ value: member, parent: entry, key });
      }
    }
  }
  return undefined;
};
