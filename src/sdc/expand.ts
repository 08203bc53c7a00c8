/**
 * ValueSet/$expand (issue 4): the codes of a ValueSet stored in the tenant or contained in a
 * Questionnaire, for answer lists in the web SDK, with `filter`, `count` and `offset`.
 *
 * casebook holds no CodeSystems, so it expands what a ValueSet enumerates: the concepts of
 * `compose.include` (less `compose.exclude`), or an expansion the ValueSet already carries.
 * Pure: the clock comes in as `now`.
 */
import { v5 as uuidv5 } from 'uuid';
import { DomainError } from '../domain/decider.js';
import type { Json } from './types.js';

/** Paging and filtering of one expansion. */
export interface ExpandOptions {
  /** Case-insensitive substring of a concept's display or code; blank = no filter. */
  readonly filter?: string;
  /** The most concepts to return (a non-negative integer); absent = all. */
  readonly count?: number;
  /** How many matching concepts to skip first (a non-negative integer); absent = 0. */
  readonly offset?: number;
  /** The expansion's timestamp (ISO 8601). */
  readonly now: string;
}

/** One code of an expansion. */
export interface ExpansionContains {
  readonly system?: string;
  readonly version?: string;
  readonly code: string;
  readonly display?: string;
}

/** `ValueSet.expansion` as $expand returns it. */
export interface ValueSetExpansion {
  /** `urn:uuid:` derived from the ValueSet and the options (not the clock): same input, same id. */
  readonly identifier: string;
  readonly timestamp: string;
  /** Matching concepts before paging. */
  readonly total: number;
  readonly offset: number;
  /** The `filter`, `count` and `offset` that were used. */
  readonly parameter?: readonly ({ name: string } & Record<string, unknown>)[];
  readonly contains?: readonly ExpansionContains[];
}

/** Namespace of the expansion identifiers (UUID v5). */
const EXPANSION_NAMESPACE = uuidv5(
  'https://casebook.dev/fhir/OperationDefinition/ValueSet-expand',
  uuidv5.URL,
);

/**
 * Expands `valueSet` (any ValueSet JSON; issue 4 `ValueSet/$expand`) and returns it with
 * `expansion` set: concepts in definition order, duplicates (same system and code) once, filtered
 * by `filter`, then `offset` skipped and at most `count` kept; `total` counts before paging.
 *
 * Sources, in order: `compose` when every include enumerates its concepts; otherwise an existing
 * `expansion.contains` (flattened; abstract entries without a code dropped); a ValueSet with
 * neither expands to nothing.
 *
 * @throws {DomainError} unprocessable (422, issue code `not-supported`) when the compose includes
 *   a whole code system, another ValueSet or a filter and there is no expansion to fall back on:
 *   casebook holds no code systems to enumerate.
 */
export const expandValueSet = (
  valueSet: Json,
  options: ExpandOptions,
): Json & { expansion: ValueSetExpansion } => {
  const all = dedupe(sourceConcepts(valueSet));
  const needle = options.filter?.trim().toLowerCase() ?? '';
  const matching = needle
    ? all.filter(
        (c) => c.code.toLowerCase().includes(needle) || (c.display ?? '').toLowerCase().includes(needle),
      )
    : all;
  const offset = options.offset ?? 0;
  const page =
    options.count === undefined ? matching.slice(offset) : matching.slice(offset, offset + options.count);
  const parameter = [
    ...(needle ? [{ name: 'filter', valueString: options.filter! }] : []),
    ...(options.count !== undefined ? [{ name: 'count', valueInteger: options.count }] : []),
    ...(options.offset !== undefined ? [{ name: 'offset', valueInteger: options.offset }] : []),
  ];
  const identity = stableJson({
    valueSet,
    filter: needle || null,
    count: options.count ?? null,
    offset,
  });
  const expansion: ValueSetExpansion = {
    identifier: `urn:uuid:${uuidv5(identity, EXPANSION_NAMESPACE)}`,
    timestamp: options.now,
    total: matching.length,
    offset,
    ...(parameter.length ? { parameter } : {}),
    ...(page.length ? { contains: page } : {}),
  };
  return { ...valueSet, expansion };
};

/** The concepts a ValueSet defines, before filtering and paging. */
const sourceConcepts = (valueSet: Json): ExpansionContains[] => {
  const compose = isObject(valueSet.compose) ? valueSet.compose : undefined;
  const includes = asArray(compose?.include);
  const unsupported = includes.map((include, i) => unenumerable(include, `ValueSet.compose.include[${i}]`));
  const firstProblem = unsupported.find((p) => p !== undefined);
  if (includes.length > 0 && !firstProblem) {
    const excluded = asArray(compose?.exclude).map((exclude, i) => {
      const problem = isObject(exclude) && exclude.filter !== undefined;
      if (problem || (isObject(exclude) && exclude.valueSet !== undefined))
        throw new DomainError(
          'unprocessable',
          'ExpansionNotSupported',
          `${label(valueSet)}: compose.exclude[${i}] uses a filter or another ValueSet; casebook can only exclude listed concepts or a whole system`,
          `ValueSet.compose.exclude[${i}]`,
          { issueCode: 'not-supported' },
        );
      return isObject(exclude) ? exclude : {};
    });
    const isExcluded = (c: ExpansionContains) =>
      excluded.some((e) => {
        if ((e.system ?? undefined) !== c.system) return false;
        const concepts = asArray(e.concept);
        // An exclude naming only a system removes that whole system.
        return concepts.length === 0 || concepts.some((x) => isObject(x) && x.code === c.code);
      });
    return includes
      .flatMap((include) => {
        const inc = include as Json;
        return asArray(inc.concept)
          .filter(
            (c): c is Json & { code: string } => isObject(c) && typeof c.code === 'string' && c.code !== '',
          )
          .map((c) => concept(inc.system, inc.version, c.code, c.display));
      })
      .filter((c) => !isExcluded(c));
  }
  const expansion = isObject(valueSet.expansion) ? valueSet.expansion : undefined;
  if (expansion && Array.isArray(expansion.contains)) return flatten(expansion.contains);
  if (firstProblem)
    throw new DomainError(
      'unprocessable',
      'ExpansionNotSupported',
      `${label(valueSet)}: ${firstProblem.message}`,
      firstProblem.expression,
      {
        issueCode: 'not-supported',
      },
    );
  return [];
};

/** Why an include can't be enumerated without a terminology server; undefined when it can. */
const unenumerable = (
  include: unknown,
  expression: string,
): { message: string; expression: string } | undefined => {
  if (!isObject(include)) return { message: 'a compose.include is not an object', expression };
  if (include.valueSet !== undefined)
    return {
      message:
        'compose.include imports another ValueSet; casebook expands only ValueSets that list their concepts (compose.include.concept)',
      expression,
    };
  if (include.filter !== undefined)
    return {
      message: `compose.include filters code system ${String(include.system ?? '')}; casebook holds no code systems, so it expands only listed concepts (compose.include.concept)`,
      expression,
    };
  if (asArray(include.concept).length === 0)
    return {
      message: `compose.include takes the whole code system ${String(include.system ?? '(no system)')}; casebook holds no code systems, so it expands only listed concepts (compose.include.concept)`,
      expression,
    };
  return undefined;
};

const concept = (system: unknown, version: unknown, code: string, display: unknown): ExpansionContains => ({
  ...(typeof system === 'string' ? { system } : {}),
  ...(typeof version === 'string' ? { version } : {}),
  code,
  ...(typeof display === 'string' ? { display } : {}),
});

/** Nested `contains` (a hierarchy) as one list; abstract entries without a code are only headers. */
const flatten = (contains: unknown[]): ExpansionContains[] =>
  contains.flatMap((entry) => {
    if (!isObject(entry)) return [];
    const own =
      typeof entry.code === 'string' && entry.code !== '' && entry.abstract !== true
        ? [concept(entry.system, entry.version, entry.code, entry.display)]
        : [];
    return [...own, ...flatten(asArray(entry.contains))];
  });

const dedupe = (concepts: ExpansionContains[]): ExpansionContains[] => {
  const seen = new Set<string>();
  return concepts.filter((c) => {
    const key = `${c.system ?? ''}|${c.code}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
};

const label = (valueSet: Json): string =>
  typeof valueSet.url === 'string'
    ? `ValueSet ${valueSet.url}`
    : typeof valueSet.id === 'string'
      ? `ValueSet ${valueSet.id}`
      : 'the ValueSet';

/** JSON with object keys sorted, so equal content gives equal text whatever the key order. */
const stableJson = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (isObject(value))
    return `{${Object.keys(value)
      .filter((k) => value[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${stableJson(value[k])}`)
      .join(',')}}`;
  return JSON.stringify(value) ?? 'null';
};

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
