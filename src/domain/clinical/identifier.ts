/** FHIR Identifier as casebook stores it: only `system` and `value` (docs/interface.md §2.5). */
export interface Identifier {
  readonly system: string;
  readonly value: string;
}

/**
 * A system or value as casebook compares it: Unicode NFC (docs/interface.md §2.5). "é" typed as one
 * code point (U+00E9) and as "e" with a combining accent (U+0065 U+0301) are the same identifier:
 * one reservation, one search match. Resources keep what the client sent; only comparisons (the
 * reservation key, the search index, duplicates in a list, scope filters) use this form.
 */
export const comparableText = (text: string): string => text.normalize('NFC');

/** Whether two identifiers are the same after NFC normalisation of system and value. */
export const sameIdentifier = (a: Identifier, b: Identifier): boolean =>
  comparableText(a.system) === comparableText(b.system) &&
  comparableText(a.value) === comparableText(b.value);

/** An identifier with system and value in NFC (the search index's form). */
export const comparableIdentifier = (identifier: Identifier): Identifier => ({
  system: comparableText(identifier.system),
  value: comparableText(identifier.value),
});
