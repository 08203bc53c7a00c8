/** FHIR Identifier as casebook stores it: only `system` and `value` (spec §2.5). */
export interface Identifier {
  readonly system: string;
  readonly value: string;
}

/** `system|value`, the FHIR token search syntax. */
export const identifierToken = (identifier: Identifier): string => `${identifier.system}|${identifier.value}`;
