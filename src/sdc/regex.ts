/**
 * Regular expressions written by clients (the Questionnaire `regex` extension, FHIRPath
 * `matches`, `matchesFull` and `replaceMatches`) run on RE2 (re2js, a port of Google's RE2/J):
 * matching takes time linear in the input, whatever the pattern (issue 10). Patterns are written
 * in JavaScript/XML Schema syntax; re2js translates what it can (`(?<name>…)`, `\uXXXX`).
 * Features RE2 cannot run in linear time (lookaround, backreferences) are refused at compile time.
 */
import { RE2JS } from 're2js';

/** FHIRPath's regex flags: `i` case-insensitive, `m` multi-line; `s` (dot matches newlines). */
export interface RegexFlags {
  readonly caseInsensitive?: boolean;
  readonly multiline?: boolean;
  readonly dotAll?: boolean;
}

/** A client pattern RE2 cannot compile (syntax, unsupported feature, too large). */
export class ClientRegexError extends Error {
  constructor(
    readonly pattern: string,
    reason: string,
  ) {
    super(`the regular expression ${JSON.stringify(pattern.slice(0, 200))} cannot be used: ${reason}`);
    this.name = 'ClientRegexError';
  }
}

const CACHE_MAX = 256;
const cache = new Map<string, RE2JS | ClientRegexError>();

/**
 * Compiles a client's pattern for RE2, remembering the last {@link CACHE_MAX} patterns.
 * @throws {ClientRegexError} when RE2 cannot compile it.
 */
export const compileClientRegex = (pattern: string, flags: RegexFlags = {}): RE2JS => {
  const bits =
    (flags.caseInsensitive ? RE2JS.CASE_INSENSITIVE : 0) |
    (flags.multiline ? RE2JS.MULTILINE : 0) |
    (flags.dotAll ? RE2JS.DOTALL : 0);
  const key = `${bits}:${pattern}`;
  let compiled = cache.get(key);
  if (compiled === undefined) {
    try {
      compiled = RE2JS.compile(RE2JS.translateRegExp(pattern), bits);
    } catch (error) {
      compiled = new ClientRegexError(pattern, error instanceof Error ? error.message : String(error));
    }
    if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value!);
    cache.set(key, compiled);
  }
  if (compiled instanceof ClientRegexError) throw compiled;
  return compiled;
};

/**
 * Does `pattern` match the whole of `value` (the `regex` extension: "the regular expression SHALL
 * match the entire string")? Linear in `value`.
 * @throws {ClientRegexError} when the pattern cannot be compiled.
 */
export const matchesWhole = (pattern: string, value: string, flags: RegexFlags = {}): boolean =>
  compileClientRegex(pattern, flags).testExact(value);

/**
 * Does `pattern` match somewhere in `value`? Linear in `value`.
 * @throws {ClientRegexError} when the pattern cannot be compiled.
 */
export const matchesAnywhere = (pattern: string, value: string, flags: RegexFlags = {}): boolean =>
  compileClientRegex(pattern, flags).test(value);

/**
 * Replaces every match of `pattern` in `value` by `substitution`, which may refer to groups as in
 * JavaScript (`$1`, `$<name>`, `$&`, `$$`). Linear in `value` (plus the output).
 * @throws {ClientRegexError} when the pattern cannot be compiled.
 */
export const replaceAllMatches = (
  pattern: string,
  value: string,
  substitution: string,
  flags: RegexFlags = {},
): string => compileClientRegex(pattern, flags).matcher(value).replaceAll(substitution);
