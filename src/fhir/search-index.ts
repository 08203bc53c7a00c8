/**
 * The values a resource is found by, for the search parameters that come from the official FHIR
 * R5 SearchParameter definitions (issue 35; docs/interface.md §4.3 rule 10): each definition's
 * FHIRPath expression (from `r5/search-parameters.json`, generated from `hl7.fhir.r5.core` by
 * `scripts/generate-r5-definitions.ts`) is evaluated with fhirpath.js over the stored content, and
 * its results become index entries the read model keeps with the row (src/projections/resources.ts
 * `search_tokens`, `search_dates`) and a search compares in SQL (src/projections/resources.ts
 * `searchWhere`).
 *
 * Entries are text, one per value:
 * - token (FHIR R5 search.html#token): `["code","system","value"]` as JSON, once with the system
 *   (`""` for none), once with `null` (any system) and, with a system, once with a `null` value
 *   (`system|`). A Coding, a CodeableConcept's codings, an Identifier, a ContactPoint, a code or a
 *   boolean are tokens. A CodeableConcept's `text` is not.
 * - reference: `["code","Type/id"]` (a literal reference, as written).
 * - date: `code|start|end`, the instants the value covers as `[start, end)` in fixed-width UTC ISO
 *   (`0001-01-01T00:00:00.000Z`), so text order is time order.
 */
import fhirpath from 'fhirpath';
import r5model from 'fhirpath/fhir-context/r5';
import type { Content, ResourceType } from '../domain/fhir/resource.js';
import type { DefinedParameter } from './r5-search-parameters.js';
import { searchDateRange } from './search.js';

const compiled = new Map<string, (resource: unknown) => unknown[]>();

/** The compiled expression (compiled once per process). */
const evaluatorOf = (expression: string) => {
  let fn = compiled.get(expression);
  if (!fn) {
    fn = fhirpath.compile(expression, r5model) as (resource: unknown) => unknown[];
    compiled.set(expression, fn);
  }
  return fn;
};

/** The earliest and latest instants as index text (years 0001–9999 only: FHIR dates). */
const FIRST = '0001-01-01T00:00:00.000Z';
const LAST = '9999-12-31T23:59:59.999Z';

/** `[start, end)` of a date, dateTime, instant or Period value; undefined for anything else. */
const rangeOf = (value: unknown): [string, string] | undefined => {
  if (typeof value === 'string') {
    const range = searchDateRange(value);
    return range ? [range.start.toISOString(), range.end.toISOString()] : undefined;
  }
  if (value && typeof value === 'object' && ('start' in value || 'end' in value)) {
    const { start, end } = value as { start?: unknown; end?: unknown };
    const from = typeof start === 'string' ? rangeOf(start)?.[0] : FIRST;
    const to = typeof end === 'string' ? rangeOf(end)?.[1] : LAST;
    return from && to ? [from, to] : undefined;
  }
  return undefined;
};

/** The token entries of one value (see the module comment). */
const tokensOf = (code: string, value: unknown): string[] => {
  const entry = (system: string | null, v: string | null) => JSON.stringify([code, system, v]);
  const coded = (system: unknown, v: unknown): string[] => {
    if (typeof v !== 'string') return typeof system === 'string' ? [entry(system, null)] : [];
    return typeof system === 'string'
      ? [entry(system, v), entry(null, v), entry(system, null)]
      : [entry('', v), entry(null, v)];
  };
  if (typeof value === 'string') return coded(undefined, value);
  if (typeof value === 'boolean') return coded(undefined, String(value));
  if (!value || typeof value !== 'object') return [];
  const o = value as Record<string, unknown>;
  if (Array.isArray(o.coding)) return o.coding.flatMap((c) => tokensOf(code, c));
  if ('code' in o) return coded(o.system, o.code); // Coding
  if ('value' in o) return coded(o.system, o.value); // Identifier, ContactPoint
  return [];
};

/** The search index of a resource: its token and reference entries, and its date entries. */
export interface SearchIndex {
  readonly tokens: string[];
  readonly dates: string[];
}

/**
 * The index entries of `content` (a stored resource of `type`, without resourceType/id/meta) for
 * the R5 parameters the type is searched by (`parameters`, from src/fhir/search.ts).
 */
export const searchIndexOf = (
  type: ResourceType,
  content: Content,
  parameters: readonly DefinedParameter[],
): SearchIndex => {
  const tokens = new Set<string>();
  const dates = new Set<string>();
  if (parameters.length === 0) return { tokens: [], dates: [] };
  const resource = { resourceType: type, ...content };
  for (const p of parameters) {
    let values: unknown[];
    try {
      values = evaluatorOf(p.expression)(resource);
    } catch {
      // Content that passed the schema but that an expression cannot walk is found by the others.
      continue;
    }
    for (const value of values)
      if (p.type === 'token') for (const t of tokensOf(p.code, value)) tokens.add(t);
      else if (p.type === 'date') {
        const range = rangeOf(value);
        if (range) dates.add(`${p.code}|${range[0]}|${range[1]}`);
      } else {
        const reference = (value as { reference?: unknown } | undefined)?.reference;
        if (typeof reference === 'string') tokens.add(JSON.stringify([p.code, reference]));
      }
  }
  return { tokens: [...tokens], dates: [...dates] };
};

/** The index entry a token search value matches (`system|value`, `|value`, `value`, `system|`). */
export const tokenEntry = (code: string, system: string | undefined, value: string): string =>
  JSON.stringify([
    code,
    system === undefined ? null : system,
    system !== undefined && value === '' ? null : value,
  ]);

/** The index entry a reference search value matches. */
export const referenceEntry = (code: string, reference: string): string => JSON.stringify([code, reference]);

/** The literal references the reference parameter `parameter` finds in `content` (`_include`). */
export const referencesOf = (type: ResourceType, content: Content, parameter: DefinedParameter): string[] => {
  let values: unknown[];
  try {
    values = evaluatorOf(parameter.expression)({ resourceType: type, ...content });
  } catch {
    return [];
  }
  return values.flatMap((v) => {
    const reference = (v as { reference?: unknown } | undefined)?.reference;
    return typeof reference === 'string' ? [reference] : [];
  });
};
