/**
 * The report editor's form ↔ QuestionnaireResponse mapping (issues 5, 32), pure: the server maps a
 * posted form with it, and the editor's Web Worker maps the page's fields with it, so both hand the
 * form engine (src/sdc/engine/) the same response.
 *
 * Field names: every question is `q:<linkId>`, repeated for several answers; a quantity's unit is
 * `u:<linkId>`. Choice fields carry the option's code (or `system|code` when two options share a
 * code), other fields the value as the HTML input gives it. `cb:tz` is the browser's UTC offset
 * (`+01:00`), used for dateTime. Inside a repeating group every child field is submitted once per
 * instance (text inputs and selects always submit), so instance k takes the k-th value;
 * `n:<groupLinkId>` is submitted once per instance to count them.
 */
import { isFhirDate, isFhirDateTime } from '../../fhir/dates.js';
import { isFhirInteger } from '../../fhir/primitives.js';
import { answerText } from '../../sdc/engine/display.js';
import {
  EXT_CALCULATED_EXPRESSION,
  extensionsOf,
  unitOf,
  unitOptionsOf,
  unitText,
} from '../../sdc/engine/extensions.js';
import { instanceKey } from '../../sdc/engine/tree.js';
import type {
  Coding,
  QuestionnaireItem,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../../sdc/types.js';
import { lossOf } from '../edge/json-numbers.js';

/** A submitted form (koa-body urlencoded: repeated names become arrays). */
export type FormBody = Readonly<Record<string, string | string[] | undefined>>;

/** One selectable answer of a choice item. */
export interface Choice {
  /** The form value. */
  readonly value: string;
  readonly label: string;
  /** The answer it stands for: `{ valueCoding }`, `{ valueString }`, … */
  readonly answer: Record<string, unknown>;
}

/** Item types the editor has inputs for; answers of other types are kept as they were. */
export const EDITABLE_TYPES: ReadonlySet<string> = new Set([
  'string',
  'text',
  'url',
  'boolean',
  'integer',
  'decimal',
  'date',
  'dateTime',
  'time',
  'coding',
  'quantity',
  'question',
]);

/** A calculated item (SDC calculatedExpression): shown, never edited; the engine gives its value. */
export const isCalculated = (item: QuestionnaireItem): boolean =>
  item.type !== 'group' &&
  item.type !== 'display' &&
  extensionsOf(item, EXT_CALCULATED_EXPRESSION).length > 0;

/**
 * Does the page have a field for the item? Not for calculated and `readOnly` items, types without
 * inputs, and coded items whose answer list could not be loaded (their stored answers are kept:
 * a code typed without its system would be a different answer).
 */
export const hasField = (item: QuestionnaireItem, choices: readonly Choice[] | undefined): boolean =>
  EDITABLE_TYPES.has(item.type) &&
  item.readOnly !== true &&
  !isCalculated(item) &&
  !(item.type === 'coding' && (choices?.length ?? 0) === 0 && item.answerConstraint !== 'optionsOrString');

/** All values of a field, in order. */
export const valuesOf = (body: FormBody, name: string): string[] => {
  const raw: unknown = body[name];
  const list: unknown[] = raw === undefined ? [] : Array.isArray(raw) ? raw : [raw];
  // A crafted body can carry nested objects (`q:x[a]=1`): only plain strings are field values.
  return list.filter((v): v is string => typeof v === 'string');
};

const valueKey = (o: Record<string, unknown>): string | undefined =>
  Object.keys(o).find((k) => k.startsWith('value') && k.length > 5);

/** The choices of an item from its answerOptions (answerValueSet codes come from the caller). */
export const optionChoices = (item: QuestionnaireItem): Choice[] => {
  const options = Array.isArray(item.answerOption) ? item.answerOption : [];
  const codes = options.map((o) => (o.valueCoding as { code?: string } | undefined)?.code);
  return options.flatMap((o): Choice[] => {
    const key = valueKey(o);
    if (!key) return [];
    const value = o[key];
    if (key === 'valueCoding') {
      const c = value as { system?: string; code?: string; display?: string };
      if (typeof c?.code !== 'string') return [];
      const shared = codes.filter((x) => x === c.code).length > 1;
      return [
        {
          value: shared ? `${c.system ?? ''}|${c.code}` : c.code,
          label: c.display ?? c.code,
          answer: { valueCoding: stripUndefined({ system: c.system, code: c.code, display: c.display }) },
        },
      ];
    }
    if (key === 'valueReference') {
      const r = value as { reference?: string; display?: string };
      if (typeof r?.reference !== 'string') return [];
      return [{ value: r.reference, label: r.display ?? r.reference, answer: { valueReference: r } }];
    }
    if (typeof value === 'string' || typeof value === 'number')
      return [{ value: String(value), label: String(value), answer: { [key]: value } }];
    return [];
  });
};

/** Choices from ValueSet expansion codes. */
export const codingChoices = (
  contains: readonly { system?: string; code: string; display?: string }[],
): Choice[] =>
  contains.map((c) => ({
    value: contains.filter((x) => x.code === c.code).length > 1 ? `${c.system ?? ''}|${c.code}` : c.code,
    label: c.display ?? c.code,
    answer: { valueCoding: stripUndefined({ system: c.system, code: c.code, display: c.display }) },
  }));

const stripUndefined = <T extends Record<string, unknown>>(o: T): T =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;

/** The form value that shows `answer` in a choice field, or undefined when no choice matches. */
export const choiceValueOf = (
  choices: readonly Choice[],
  answer: QuestionnaireResponseAnswer,
): string | undefined => {
  const key = valueKey(answer);
  if (!key) return undefined;
  const given = answer[key];
  return choices.find((c) => {
    const other = c.answer[key];
    if (key === 'valueCoding') {
      const a = given as { system?: string; code?: string };
      const b = other as { system?: string; code?: string } | undefined;
      return b?.code === a?.code && (!a?.system || !b?.system || a.system === b.system);
    }
    if (key === 'valueReference')
      return (other as { reference?: string })?.reference === (given as { reference?: string })?.reference;
    return other === given;
  })?.value;
};

/** The value an answer shows in a non-choice input (date → `YYYY-MM-DD`, dateTime → local `YYYY-MM-DDThh:mm`). */
export const inputValueOf = (type: string, answer: QuestionnaireResponseAnswer): string => {
  const key = valueKey(answer);
  const value = key ? answer[key] : undefined;
  if (value === undefined || value === null) return '';
  if (type === 'dateTime' && typeof value === 'string') return value.slice(0, 16);
  if (type === 'boolean') return value === true ? 'true' : value === false ? 'false' : '';
  if (type === 'quantity' && typeof value === 'object') {
    const amount = (value as { value?: unknown }).value;
    return typeof amount === 'number' ? String(amount) : '';
  }
  if (typeof value === 'object') return '';
  return String(value);
};

/** The `u:` field value that shows a quantity answer's unit (undefined when none of the item's units). */
export const unitValueOf = (
  item: QuestionnaireItem,
  answer: QuestionnaireResponseAnswer | undefined,
): string | undefined => {
  const quantity = answer?.valueQuantity as { code?: string; unit?: string; system?: string } | undefined;
  if (!quantity) return undefined;
  const unit = quantityUnits(item).find(
    (u) =>
      (quantity.code !== undefined && u.code === quantity.code) ||
      (quantity.code === undefined && unitText(u) === quantity.unit),
  );
  return unit ? unitValue(unit) : undefined;
};

/**
 * The choices of each item with the response's stored codings added where the list lacks them
 * (a code since removed from its ValueSet): shown by their display and kept on the next save,
 * never dropped in silence. Submitting them still meets the answerValueSet check.
 */
export const withStoredChoices = (
  choices: ReadonlyMap<string, readonly Choice[]>,
  items: readonly QuestionnaireResponseItem[] | undefined,
): Map<string, Choice[]> => {
  const out = new Map<string, Choice[]>([...choices].map(([linkId, list]) => [linkId, [...list]]));
  const walk = (list: readonly QuestionnaireResponseItem[] | undefined) => {
    for (const r of list ?? []) {
      const known = out.get(r.linkId);
      for (const answer of r.answer ?? []) {
        const coding = answer.valueCoding as Coding | undefined;
        if (known && coding && typeof coding.code === 'string' && choiceValueOf(known, answer) === undefined)
          known.push({
            value: `${coding.system ?? ''}|${coding.code}`,
            label: `${coding.display ?? coding.code} (no longer listed)`,
            answer: {
              valueCoding: stripUndefined({
                system: coding.system,
                code: coding.code,
                display: coding.display,
              }),
            },
          });
        walk(answer.item);
      }
      walk(r.item);
    }
  };
  walk(items);
  return out;
};

/** The units a quantity item is answered in: its unitOptions, else its questionnaire-unit. */
export const quantityUnits = (item: QuestionnaireItem): Coding[] => {
  const options = unitOptionsOf(item);
  if (options.length > 0) return options;
  const unit = unitOf(item);
  return unit ? [unit] : [];
};

/** The form value of a unit (its code, else its text). */
export const unitValue = (unit: Coding): string => unit.code ?? unitText(unit);

const OFFSET = /^[+-](?:0\d|1[0-4]):[0-5]\d$|^Z$/;

/**
 * Converts one field value to an answer; `unit` is the quantity's `u:` field.
 * @returns the answer, `null` for an empty value, or a message when the value is not valid.
 */
export const answerOf = (
  item: QuestionnaireItem,
  raw: string,
  choices: readonly Choice[] | undefined,
  tz: string,
  unit?: string,
): QuestionnaireResponseAnswer | null | string => {
  const text = raw.trim();
  if (text === '') return null;
  if (choices && choices.length > 0) {
    const match = choices.find((c) => c.value === text);
    if (match) return { ...match.answer };
    // An open choice's own text is a string, never a code without a system.
    if (item.answerConstraint === 'optionsOrString') return { valueString: raw.replace(/\r\n/g, '\n') };
    return 'Choose one of the listed answers.';
  }
  switch (item.type) {
    case 'boolean':
      if (text === 'true') return { valueBoolean: true };
      if (text === 'false') return { valueBoolean: false };
      return 'Answer Yes or No.';
    case 'integer': {
      if (!/^[+-]?\d+$/.test(text)) return 'Enter a whole number.';
      const n = Number(text);
      return isFhirInteger(n) ? { valueInteger: n } : 'The number is too large.';
    }
    case 'decimal':
    case 'quantity': {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) return 'Enter a number.';
      // Beyond a double (1e400) or lost to 0 (1e-400): refused, never stored as null or 0.
      if (lossOf(text) !== undefined) return 'The number is out of range.';
      const value = Number(text);
      if (item.type === 'decimal') return { valueDecimal: value };
      const units = quantityUnits(item);
      const chosen = units.length === 1 ? units[0] : units.find((u) => unitValue(u) === unit);
      if (units.length > 1 && !chosen) return 'Choose a unit.';
      return {
        valueQuantity: stripUndefined({
          value,
          unit: chosen ? unitText(chosen) : undefined,
          system: chosen?.system,
          code: chosen?.code,
        }),
      };
    }
    case 'date':
      return isFhirDate(text) ? { valueDate: text } : 'Enter a date (YYYY-MM-DD).';
    case 'dateTime': {
      const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2}(\.\d+)?)?$/.exec(text);
      const value = m ? `${m[1]}T${m[2]}${m[3] ?? ':00'}${OFFSET.test(tz) ? tz : 'Z'}` : text;
      return isFhirDateTime(value) && value.includes('T')
        ? { valueDateTime: value }
        : 'Enter a date and time.';
    }
    case 'time': {
      const m = /^(\d{2}:\d{2})(:\d{2})?$/.exec(text);
      return m ? { valueTime: `${m[1]}${m[2] ?? ':00'}` } : 'Enter a time (hh:mm).';
    }
    case 'url':
      return { valueUri: text };
    default:
      return { valueString: raw.replace(/\r\n/g, '\n') };
  }
};

/**
 * The most instances of one repeating group a form may post (a report with more than 100 nodules
 * is not a report): the editor's tree grows with every instance, so a crafted post cannot make
 * the engine hold the event loop.
 */
export const MAX_REPEAT_INSTANCES = 100;

/** Options of {@link buildItems}. */
export interface BuildOptions {
  /** Choices per linkId (answerOption or expanded answerValueSet, see {@link withStoredChoices}). */
  readonly choices: ReadonlyMap<string, readonly Choice[]>;
  /** The response's current items: answers of items without fields are kept from here. */
  readonly existing?: readonly QuestionnaireResponseItem[];
}

/** The result of {@link buildItems}. */
export interface BuiltItems {
  /** Every item the page shows, answered or not, in Questionnaire order (the engine prunes). */
  readonly items: QuestionnaireResponseItem[];
  /** Field problems (values that are not valid for the item's type) per node key (engine/tree.ts). */
  readonly errors: Map<string, string[]>;
}

/** `compute`, called once per argument. */
const remembered = <T>(compute: (key: string) => T): ((key: string) => T) => {
  const known = new Map<string, T>();
  return (key) => {
    if (!known.has(key)) known.set(key, compute(key));
    return known.get(key)!;
  };
};

/** The answers of `linkId` in `existing`, occurrence by occurrence (instance k of a repeating group: the k-th). */
const existingAnswers = (
  existing: readonly QuestionnaireResponseItem[] | undefined,
  linkId: string,
): QuestionnaireResponseAnswer[][] => {
  const found: QuestionnaireResponseAnswer[][] = [];
  const walk = (list: readonly QuestionnaireResponseItem[] | undefined) => {
    for (const r of list ?? []) {
      if (r.linkId === linkId) found.push(r.answer ?? []);
      walk(r.item);
      for (const a of r.answer ?? []) walk(a.item);
    }
  };
  walk(existing);
  return found;
};

/**
 * Maps a submitted form to response items: every item the page shows (groups with their children,
 * each instance of a repeating group, questions answered or not), answers in Questionnaire order,
 * empty values dropped, a non-repeating question keeping its first value. Items without a field
 * ({@link hasField}) keep their stored answers — the server, not the page, guarantees a read-only
 * answer is never changed by a form post — except calculated ones, which the engine fills.
 * Enablement is the engine's: answers of disabled items are still mapped here.
 */
export const buildItems = (
  questionnaireItems: readonly QuestionnaireItem[] | undefined,
  body: FormBody,
  options: BuildOptions,
): BuiltItems => {
  const tz = valuesOf(body, 'cb:tz')[0] ?? 'Z';
  const errors = new Map<string, string[]>();
  // Each field is read once: instance k of a repeating group takes the k-th of the same list.
  const field = remembered((name: string) => valuesOf(body, name));
  const storedAnswers = remembered((linkId: string) => existingAnswers(options.existing, linkId));
  const fail = (key: string, message: string) => errors.set(key, [...(errors.get(key) ?? []), message]);
  const choicesOf = (linkId: string) => options.choices.get(linkId);

  /** `instance`: inside the k-th instance of a repeating group, take the k-th value of each field. */
  const build = (
    list: readonly QuestionnaireItem[] | undefined,
    prefix: string,
    instance: number | undefined,
  ): QuestionnaireResponseItem[] => {
    const out: QuestionnaireResponseItem[] = [];
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string' || item.type === 'display') continue;
      const base = { linkId: item.linkId, ...(typeof item.text === 'string' ? { text: item.text } : {}) };
      if (item.type === 'group') {
        if (item.repeats === true && instance === undefined) {
          const posted = field(`n:${item.linkId}`).length;
          if (posted > MAX_REPEAT_INSTANCES)
            fail(
              `${prefix}${item.linkId}`,
              `Give at most ${MAX_REPEAT_INSTANCES} of these (this form has ${posted}).`,
            );
          const count = Math.min(posted, MAX_REPEAT_INSTANCES);
          for (let k = 0; k < count; k++)
            out.push({ ...base, item: build(item.item, `${instanceKey(prefix, item.linkId, k)}/`, k) });
          continue;
        }
        out.push({ ...base, item: build(item.item, prefix, instance) });
        continue;
      }
      const key = `${prefix}${item.linkId}`;
      const nested = item.item?.length
        ? build(item.item, `${instanceKey(prefix, item.linkId, 0)}/`, instance)
        : [];
      if (!hasField(item, choicesOf(item.linkId))) {
        const stored = isCalculated(item) ? [] : (storedAnswers(item.linkId)[instance ?? 0] ?? []);
        out.push({ ...base, ...(stored.length > 0 ? { answer: stored } : {}) });
        continue;
      }
      const all = field(`q:${item.linkId}`);
      const units = field(`u:${item.linkId}`);
      const pick = <T>(values: T[]): T[] =>
        instance === undefined ? values : values[instance] !== undefined ? [values[instance]!] : [];
      const raws = pick(all);
      const unit = pick(units)[0];
      const answers: QuestionnaireResponseAnswer[] = [];
      for (const raw of raws) {
        const answer = answerOf(item, raw, choicesOf(item.linkId), tz, unit);
        if (answer === null) continue;
        if (typeof answer === 'string') fail(key, answer);
        else if (!answers.some((a) => JSON.stringify(a) === JSON.stringify(answer))) answers.push(answer);
      }
      const kept = item.repeats === true ? answers : answers.slice(0, 1);
      // Child questions of a question (answer.item) ride on its first answer.
      if (kept.length > 0 && nested.length > 0) kept[0] = { ...kept[0], item: nested };
      out.push({ ...base, ...(kept.length > 0 ? { answer: kept } : {}) });
    }
    return out;
  };
  return { items: build(questionnaireItems, '', undefined), errors };
};

/** All items of a Questionnaire by linkId. */
export const itemsByLinkId = (
  items: readonly QuestionnaireItem[] | undefined,
): Map<string, QuestionnaireItem> => {
  const map = new Map<string, QuestionnaireItem>();
  const walk = (list: readonly QuestionnaireItem[] | undefined) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      if (!map.has(item.linkId)) map.set(item.linkId, item);
      walk(item.item);
    }
  };
  walk(items);
  return map;
};

/** An answer as the read-only view shows it: its choice's label, else the engine's text (units included). */
export const shownAnswer = (
  item: QuestionnaireItem,
  answer: QuestionnaireResponseAnswer,
  choices: readonly Choice[] | undefined,
): string => {
  const value = choices ? choiceValueOf(choices, answer) : undefined;
  return (
    (value !== undefined ? choices?.find((c) => c.value === value)?.label : undefined) ??
    answerText(item, answer)
  );
};
