/** FHIR Identifier as casebook stores it: only `system` and `value` (docs/interface.md §2.5). */
export interface Identifier {
  readonly system: string;
  readonly value: string;
}
