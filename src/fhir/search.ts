/** The search parameters the data server implements (issue 3, issue 35), per resource type. */
import { CLINICAL_TYPES, type ClinicalType, type ResourceType } from '../domain/fhir/resource.js';
import { isCalendarDate } from './dates.js';
import { type DefinedParameter, definedParameters } from './r5-search-parameters.js';
import { CLINICAL_COMPARTMENT } from './references.js';

export type SearchParameter =
  | { readonly kind: 'id' }
  | { readonly kind: 'token'; readonly path: string }
  /** A reference to the Patient compartment (subject, for, patient). */
  | { readonly kind: 'patient'; readonly path: string }
  | { readonly kind: 'encounter'; readonly path: string }
  /** Equality on a top-level string element. */
  | { readonly kind: 'element'; readonly element: string; readonly type: 'uri' | 'token' }
  /**
   * A parameter of the official R5 definitions, found through the index the read model keeps
   * (src/fhir/search-index.ts): token, date or reference.
   */
  | { readonly kind: 'indexed'; readonly definition: DefinedParameter };

export interface TypeSearch {
  /**
   * The type's parameters by name: a Map, so a name such as `constructor` or `__proto__` is an
   * unknown parameter (400), never a property every object inherits (issue 33).
   */
  readonly parameters: ReadonlyMap<string, SearchParameter>;
  readonly _include?: readonly string[];
  /** The R5 definitions the read model indexes for this type (src/fhir/search-index.ts). */
  readonly indexed: readonly DefinedParameter[];
}

const id: SearchParameter = { kind: 'id' };

const parametersOf = (table: Record<string, SearchParameter>): ReadonlyMap<string, SearchParameter> =>
  new Map(Object.entries(table));

/** A type searched by hand-written parameters only. */
const written = (table: Record<string, SearchParameter>, _include?: readonly string[]): TypeSearch => ({
  parameters: parametersOf(table),
  ...(_include ? { _include } : {}),
  indexed: [],
});

/**
 * The search of a clinical type (issue 35; docs/interface.md §2.7): `_id`, its Patient and
 * Encounter through the compartment columns (`patient`, `subject`, `encounter`), `identifier`
 * through the identifier index, and every token, date and reference parameter of its official R5
 * definitions through the search index; `_include` on each reference parameter.
 */
const clinicalSearch = (type: ClinicalType): TypeSearch => {
  const { patient, encounter } = CLINICAL_COMPARTMENT[type];
  const table: Record<string, SearchParameter> = { _id: id };
  const indexed: DefinedParameter[] = [];
  for (const definition of definedParameters(type)) {
    if ((definition.code === 'patient' || definition.code === 'subject') && patient)
      table[definition.code] = { kind: 'patient', path: `${type}.${patient}` };
    else if (definition.code === 'encounter' && encounter)
      table.encounter = { kind: 'encounter', path: `${type}.encounter` };
    else if (definition.code === 'identifier')
      table.identifier = { kind: 'token', path: `${type}.identifier` };
    else {
      table[definition.code] = { kind: 'indexed', definition };
      indexed.push(definition);
    }
  }
  const _include = [...Object.entries(table)]
    .filter(
      ([, p]) =>
        p.kind === 'patient' ||
        p.kind === 'encounter' ||
        (p.kind === 'indexed' && p.definition.type === 'reference'),
    )
    .map(([code]) => `${type}:${code}`);
  return { parameters: parametersOf(table), indexed, ...(_include.length > 0 ? { _include } : {}) };
};

/** The R5 definition `code` of `type` (issue 35: QuestionnaireResponse `authored`). */
const defined = (type: ResourceType, code: string): SearchParameter & { kind: 'indexed' } => {
  const definition = definedParameters(type).find((p) => p.code === code);
  if (!definition) throw new Error(`no R5 search parameter ${type}.${code}`);
  return { kind: 'indexed', definition };
};

const questionnaireResponseAuthored = defined('QuestionnaireResponse', 'authored');

export const SEARCH_PARAMETERS: Record<ResourceType, TypeSearch> = {
  Patient: written({ _id: id, identifier: { kind: 'token', path: 'Patient.identifier' } }),
  Practitioner: written({ _id: id, identifier: { kind: 'token', path: 'Practitioner.identifier' } }),
  Encounter: written({
    _id: id,
    identifier: { kind: 'token', path: 'Encounter.identifier' },
    subject: { kind: 'patient', path: 'Encounter.subject' },
    patient: { kind: 'patient', path: 'Encounter.subject' },
  }),
  Task: written({
    _id: id,
    identifier: { kind: 'token', path: 'Task.identifier' },
    patient: { kind: 'patient', path: 'Task.for' },
    subject: { kind: 'patient', path: 'Task.for' },
    encounter: { kind: 'encounter', path: 'Task.encounter' },
    status: { kind: 'element', element: 'status', type: 'token' },
  }),
  Questionnaire: written({
    _id: id,
    url: { kind: 'element', element: 'url', type: 'uri' },
    version: { kind: 'element', element: 'version', type: 'token' },
    identifier: { kind: 'token', path: 'Questionnaire.identifier' },
  }),
  QuestionnaireResponse: {
    parameters: parametersOf({
      _id: id,
      subject: { kind: 'patient', path: 'QuestionnaireResponse.subject' },
      patient: { kind: 'patient', path: 'QuestionnaireResponse.subject' },
      encounter: { kind: 'encounter', path: 'QuestionnaireResponse.encounter' },
      status: { kind: 'element', element: 'status', type: 'token' },
      authored: questionnaireResponseAuthored,
    }),
    _include: ['QuestionnaireResponse:subject', 'QuestionnaireResponse:encounter'],
    indexed: [questionnaireResponseAuthored.definition],
  },
  ValueSet: written({
    _id: id,
    url: { kind: 'element', element: 'url', type: 'uri' },
    version: { kind: 'element', element: 'version', type: 'token' },
  }),
  ...(Object.fromEntries(CLINICAL_TYPES.map((type) => [type, clinicalSearch(type)])) as Record<
    ClinicalType,
    TypeSearch
  >),
};

/**
 * A `_count` value (FHIR R5 search.html#count): a non-negative integer written in at most nine
 * decimal digits; `1e3`, `0x10`, `-0` or `1.0` are not one. The one parser of every `_count`
 * (search, history, `$everything`, AuditEvent).
 * @returns the count, or undefined when `text` is not one.
 */
export const countOf = (text: string): number | undefined =>
  /^\d{1,9}$/.test(text) ? Number(text) : undefined;

const SEARCH_DATE =
  /^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2}))?)?)?$/;

/**
 * The instants a FHIR search date value covers (R5 search.html "date"): `2026` a year, `2026-03` a
 * month, `2026-03-01` a day (UTC), or one instant (a date-time with a zone), as `[start, end)`.
 * Only real calendar values: a month 13, 31 February or hour 25 is undefined, not the date
 * `Date` would roll it over to (31 February would otherwise search 3 March).
 * @returns undefined when `text` is not such a value.
 */
export const searchDateRange = (text: string): { start: Date; end: Date } | undefined => {
  const m = SEARCH_DATE.exec(text);
  if (!m) return undefined;
  const [, year, month, day, hour, minute, second] = m;
  if (!isCalendarDate(Number(year), Number(month ?? 1), Number(day ?? 1))) return undefined;
  const start = new Date(`${year}-${month ?? '01'}-${day ?? '01'}T00:00:00Z`);
  const end = new Date(start);
  if (month === undefined) end.setUTCFullYear(end.getUTCFullYear() + 1);
  else if (day === undefined) end.setUTCMonth(end.getUTCMonth() + 1);
  else if (hour === undefined) end.setUTCDate(end.getUTCDate() + 1);
  else {
    if (Number(hour) > 23 || Number(minute) > 59 || Number(second ?? 0) > 59) return undefined;
    const instant = new Date(text);
    if (Number.isNaN(instant.getTime())) return undefined;
    return { start: instant, end: new Date(instant.getTime() + 1) };
  }
  return { start, end };
};
