/**
 * An answer as a person reads it (issue 32 "Units appear nowhere"): the one rendering of the
 * editor's calculated values and read-only view and of $generate-narrative (so of the exported
 * report text). Pure.
 *
 * Booleans as Yes/No; a coding by its display (else the display of the item's matching
 * answerOption, else its code); a quantity as value and unit; an integer or decimal with the
 * item's questionnaire-unit (`7 mm`; UCUM `%` written `45%`); dates and times as given;
 * references by display, then reference; attachments by title and url.
 */
import type { Coding, QuestionnaireItem, QuestionnaireResponseAnswer } from '../types.js';
import { arrayOf, isObject, unitOf, unitText } from './extensions.js';

/** `amount unit`, or `amount%` for UCUM's percent. */
export const withUnit = (amount: string, unit: string): string =>
  !unit ? amount : unit === '%' ? `${amount}%` : `${amount} ${unit}`;

/** A coding's text: its display, the matching answerOption's display, its code. */
export const codingText = (value: unknown, item: QuestionnaireItem | undefined): string => {
  if (!isObject(value)) return '';
  const coding = value as Coding;
  if (typeof coding.display === 'string' && coding.display.trim()) return coding.display;
  const option = arrayOf<unknown>(item?.answerOption)
    .map((o) => (isObject(o) && isObject(o.valueCoding) ? (o.valueCoding as Coding) : undefined))
    .find(
      (c) =>
        c !== undefined &&
        typeof coding.code === 'string' &&
        c.code === coding.code &&
        (!coding.system || !c.system || c.system === coding.system),
    );
  if (typeof option?.display === 'string' && option.display.trim()) return option.display;
  return typeof coding.code === 'string' ? coding.code : '';
};

/** A Quantity as `7 mm` (comparator kept: `<5 mm`). */
export const quantityText = (value: unknown): string => {
  if (!isObject(value) || (typeof value.value !== 'number' && typeof value.value !== 'string')) return '';
  const comparator = typeof value.comparator === 'string' ? value.comparator : '';
  const unit =
    typeof value.unit === 'string' && value.unit.trim()
      ? value.unit
      : typeof value.code === 'string'
        ? value.code
        : '';
  return withUnit(`${comparator}${value.value}`, unit);
};

const attachmentText = (value: unknown): string => {
  if (!isObject(value)) return '';
  const title = typeof value.title === 'string' ? value.title : '';
  const url = typeof value.url === 'string' ? value.url : '';
  if (title && url) return `${title} (${url})`;
  if (title || url) return title || url;
  return typeof value.contentType === 'string' ? `Attachment (${value.contentType})` : 'Attachment';
};

const referenceText = (value: unknown): string => {
  if (!isObject(value)) return '';
  if (typeof value.display === 'string' && value.display.trim()) return value.display;
  if (typeof value.reference === 'string' && value.reference.trim()) return value.reference;
  const identifier = value.identifier;
  return isObject(identifier) && typeof identifier.value === 'string' ? identifier.value : '';
};

/**
 * The text of one answer of `item` ('' when it has no value to show); see the module comment.
 * Multi-line strings keep their line breaks.
 */
export const answerText = (
  item: QuestionnaireItem | undefined,
  answer: QuestionnaireResponseAnswer,
): string => {
  const key = Object.keys(answer).find((k) => k.startsWith('value') && answer[k] !== undefined);
  if (!key) return '';
  const value = answer[key];
  switch (key) {
    case 'valueBoolean':
      return value === true ? 'Yes' : value === false ? 'No' : '';
    case 'valueCoding':
      return codingText(value, item);
    case 'valueQuantity':
      return quantityText(value);
    case 'valueInteger':
    case 'valueDecimal':
      return typeof value === 'number' ? withUnit(String(value), item ? unitText(unitOf(item)) : '') : '';
    case 'valueAttachment':
      return attachmentText(value);
    case 'valueReference':
      return referenceText(value);
    case 'valueCodeableConcept': {
      if (!isObject(value)) return '';
      if (typeof value.text === 'string' && value.text.trim()) return value.text;
      return arrayOf<Coding>(value.coding)
        .map((c) => codingText(c, item))
        .filter(Boolean)
        .join(', ');
    }
    default:
      // valueString, valueDate, valueDateTime, valueTime, valueUri… as given.
      return typeof value === 'string' || typeof value === 'number' ? String(value) : '';
  }
};
