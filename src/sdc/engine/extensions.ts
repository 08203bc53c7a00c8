/**
 * The Questionnaire extensions the form engine reads (R5 core extensions and the SDC IG), and how
 * to read them. Pure.
 */
import type { Coding, Extension } from '../types.js';

const CORE = 'http://hl7.org/fhir/StructureDefinition/';
const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';

export const EXT_MIN_LENGTH = `${CORE}minLength`;
export const EXT_REGEX = `${CORE}regex`;
export const EXT_MIN_VALUE = `${CORE}minValue`;
export const EXT_MAX_VALUE = `${CORE}maxValue`;
export const EXT_MAX_DECIMAL_PLACES = `${CORE}maxDecimalPlaces`;
/** A computable unit of a decimal, integer or quantity item: a Coding, shown beside the field. */
export const EXT_UNIT = `${CORE}questionnaire-unit`;
/** One unit a quantity item may be answered in (a Coding; several make a choice). */
export const EXT_UNIT_OPTION = `${CORE}questionnaire-unitOption`;
/** A ValueSet (valueCanonical) of the units a quantity item may be answered in. */
export const EXT_UNIT_VALUE_SET = `${CORE}questionnaire-unitValueSet`;
/** The fewest answers (questions) or instances (groups) a repeating item takes (valueInteger). */
export const EXT_MIN_OCCURS = `${CORE}questionnaire-minOccurs`;
/** The most answers (questions) or instances (groups) a repeating item takes (valueInteger). */
export const EXT_MAX_OCCURS = `${CORE}questionnaire-maxOccurs`;
/** On an answerOption (valueBoolean): the option cannot be chosen together with others. */
export const EXT_OPTION_EXCLUSIVE = `${CORE}questionnaire-optionExclusive`;
/** A MIME type an attachment item accepts (valueCode; several make a list). */
export const EXT_MIME_TYPE = `${CORE}mimeType`;
/** The largest attachment an item accepts, in bytes (valueDecimal). */
export const EXT_MAX_SIZE = `${CORE}maxSize`;
/** Named FHIRPath results for the expressions of the element and its descendants. */
export const EXT_VARIABLE = `${CORE}variable`;
/**
 * An invariant of the Questionnaire or of one item (core extension `questionnaire-constraint`, used
 * by the SDC IG): sub-extensions `key`, `requirements`, `severity` (error | warning), `expression`
 * (FHIRPath), `human` and `location`.
 */
export const EXT_QUESTIONNAIRE_CONSTRAINT = `${CORE}questionnaire-constraint`;
export const EXT_ENABLE_WHEN_EXPRESSION = `${SDC}sdc-questionnaire-enableWhenExpression`;
export const EXT_CALCULATED_EXPRESSION = `${SDC}sdc-questionnaire-calculatedExpression`;
export const EXT_INITIAL_EXPRESSION = `${SDC}sdc-questionnaire-initialExpression`;
/** The smallest quantity a quantity item accepts (valueQuantity; compared across UCUM units). */
export const EXT_MIN_QUANTITY = `${SDC}sdc-questionnaire-minQuantity`;
/** The largest quantity a quantity item accepts (valueQuantity; compared across UCUM units). */
export const EXT_MAX_QUANTITY = `${SDC}sdc-questionnaire-maxQuantity`;
export const EXT_LAUNCH_CONTEXT = `${SDC}sdc-questionnaire-launchContext`;
/**
 * The permitted answers of a question, computed at run time (SDC "Expressions", answerExpression):
 * FHIRPath or `application/x-fhir-query`; only on an item without answerOption and answerValueSet.
 */
export const EXT_ANSWER_EXPRESSION = `${SDC}sdc-questionnaire-answerExpression`;
/** Candidate answers offered to the person filling the form, none chosen (SDC population). */
export const EXT_CANDIDATE_EXPRESSION = `${SDC}sdc-questionnaire-candidateExpression`;
export const EXT_ITEM_POPULATION_CONTEXT = `${SDC}sdc-questionnaire-itemPopulationContext`;

/** `value` is a non-null object and not an array. */
export const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** `value` when it is an array, else `[]`. */
export const arrayOf = <T>(value: unknown): T[] => (Array.isArray(value) ? (value as T[]) : []);

/** The extensions of `element` with `url`, with their index in `element.extension`. */
export const extensionsOf = (
  element: { extension?: unknown },
  url: string,
): { ext: Extension; index: number }[] =>
  arrayOf<Extension>(element.extension)
    .map((ext, index) => ({ ext, index }))
    .filter(({ ext }) => isObject(ext) && ext.url === url);

/** The `[value[x] key, value]` of the first extension of `element` with `url`. */
export const extensionValue = (
  element: { extension?: unknown },
  url: string,
): [string, unknown] | undefined => {
  const ext = extensionsOf(element, url)[0]?.ext;
  if (!ext) return undefined;
  const key = Object.keys(ext).find((k) => k.startsWith('value'));
  return key ? [key, ext[key]] : undefined;
};

/** An Expression (R5 metadata type) as the engine reads it. */
export interface ExpressionValue {
  readonly name?: string;
  readonly language?: string;
  readonly expression?: string;
}

/** The `valueExpression` of an extension, when it has one. */
export const expressionOf = (ext: Extension): ExpressionValue | undefined =>
  isObject(ext.valueExpression) ? (ext.valueExpression as ExpressionValue) : undefined;

/** A Coding of a `value[x]`, when it is one. */
const codingOf = (value: unknown): Coding | undefined => (isObject(value) ? (value as Coding) : undefined);

/** The item's `questionnaire-unit` Coding. */
export const unitOf = (item: { extension?: unknown }): Coding | undefined =>
  codingOf(extensionValue(item, EXT_UNIT)?.[1]);

/** The item's `questionnaire-unitOption` Codings, in order. */
export const unitOptionsOf = (item: { extension?: unknown }): Coding[] =>
  extensionsOf(item, EXT_UNIT_OPTION)
    .map(({ ext }) => codingOf(ext.valueCoding))
    .filter((c): c is Coding => c !== undefined);

/** How a unit reads beside a number: its display, else its code (`mm`, `kg/m²`). */
export const unitText = (unit: Coding | undefined): string =>
  typeof unit?.display === 'string' && unit.display.trim()
    ? unit.display
    : typeof unit?.code === 'string'
      ? unit.code
      : '';
