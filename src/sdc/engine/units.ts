/// <reference path="./ucum-lhc.d.ts" />
/**
 * UCUM unit comparison for the form engine (issue 35: sdc-questionnaire-minQuantity/maxQuantity
 * compare across units, `30 mm` ≤ `5 cm`). Conversion by the NLM's `@lhncbc/ucum-lhc` (the
 * library fhirpath.js uses, so the browser bundle already holds it). Pure.
 */
import { UcumLhcUtils } from '@lhncbc/ucum-lhc';
import { isObject } from './extensions.js';

/** The UCUM code system. */
export const UCUM = 'http://unitsofmeasure.org';

let utils: ReturnType<typeof UcumLhcUtils.getInstance> | undefined;
const ucumUtils = () => {
  utils ??= UcumLhcUtils.getInstance();
  return utils;
};

/**
 * The UCUM code of a Quantity: its `code` when its system is UCUM (or absent), else its `unit`
 * text when that is a valid UCUM unit; undefined otherwise.
 */
export const ucumCodeOf = (quantity: Record<string, unknown>): string | undefined => {
  if (typeof quantity.code === 'string' && (quantity.system === undefined || quantity.system === UCUM))
    return quantity.code;
  if (quantity.code === undefined && typeof quantity.unit === 'string' && quantity.unit !== '')
    return ucumUtils().validateUnitString(quantity.unit).status === 'valid' ? quantity.unit : undefined;
  return undefined;
};

/**
 * Compares two Quantities across UCUM units (the first converted to the second's unit).
 * @returns <0, 0 or >0 (the sign of a − b); undefined when either has no number, or their units
 *   are neither the same (system and code, else unit text) nor both UCUM and commensurable (cm, kg).
 */
export const compareQuantities = (a: unknown, b: unknown): number | undefined => {
  if (!isObject(a) || !isObject(b) || typeof a.value !== 'number' || typeof b.value !== 'number')
    return undefined;
  const from = ucumCodeOf(a);
  const to = ucumCodeOf(b);
  // Not UCUM, but the same unit named the same way (`Kg` and `Kg`): comparable as they are.
  const sameText = (q: Record<string, unknown>) =>
    `${String(q.system ?? '')}|${String(q.code ?? q.unit ?? '')}`;
  if ((from === undefined || to === undefined) && sameText(a) === sameText(b) && sameText(a) !== '|')
    return Math.sign(a.value - b.value);
  if (from === undefined || to === undefined) return undefined;
  if (from === to) return Math.sign(a.value - b.value);
  const converted = ucumUtils().convertUnitTo(from, a.value, to);
  if (converted.status !== 'succeeded' || typeof converted.toVal !== 'number') return undefined;
  // Conversion is floating point (1 [in_i] is 2.54 cm): equal within 1e-9 relative.
  const difference = converted.toVal - b.value;
  return Math.abs(difference) <= 1e-9 * Math.max(Math.abs(b.value), 1) ? 0 : Math.sign(difference);
};
