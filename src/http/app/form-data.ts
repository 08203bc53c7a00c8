/**
 * The report editor's form ↔ QuestionnaireResponse mapping (issue 5), pure.
 *
 * Field names: every question is `q:<linkId>`, repeated for several answers. Choice fields carry
 * the option's code (or `system|code` when two options share a code), other fields the value as
 * the HTML input gives it. `cb:tz` is the browser's UTC offset (`+01:00`), used for dateTime.
 * Inside a repeating group every child field is submitted once per instance (text inputs and
 * selects always submit), so instance k takes the k-th value; `n:<groupLinkId>` is submitted once
 * per instance to count them.
 */

import { isFhirDate, isFhirDateTime } from '../../fhir/dates.js';
import { isFhirInteger } from '../../fhir/primitives.js';
import type {
  QuestionnaireItem,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../../sdc/types.js';
import { lossOf } from '../edge/json-numbers.js';
import { evaluateEnableWhen, normaliseValue, rulesOf, type Values } from './enable-when.js';

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
export const EDITABLE_TYPES = new Set([
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
  'question',
]);

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
  if (typeof value === 'object') return '';
  return String(value);
};

const OFFSET = /^[+-](?:0\d|1[0-4]):[0-5]\d$|^Z$/;

/**
 * Converts one field value to an answer.
 * @returns the answer, `null` for an empty value, or a message when the value is not valid.
 */
export const answerOf = (
  item: QuestionnaireItem,
  raw: string,
  choices: readonly Choice[] | undefined,
  tz: string,
): QuestionnaireResponseAnswer | null | string => {
  const text = raw.trim();
  if (text === '') return null;
  if (choices && choices.length > 0) {
    const match = choices.find((c) => c.value === text);
    if (match) return { ...match.answer };
    if (item.answerConstraint === 'optionsOrString') return { valueString: text };
    return 'choose one of the listed answers';
  }
  switch (item.type) {
    case 'boolean':
      if (text === 'true') return { valueBoolean: true };
      if (text === 'false') return { valueBoolean: false };
      return 'answer Yes or No';
    case 'integer': {
      if (!/^[+-]?\d+$/.test(text)) return 'enter a whole number';
      const n = Number(text);
      return isFhirInteger(n) ? { valueInteger: n } : 'the number is too large';
    }
    case 'decimal': {
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) return 'enter a number';
      // Beyond a double (1e400) or lost to 0 (1e-400): refused, never stored as null or 0.
      return lossOf(text) === undefined ? { valueDecimal: Number(text) } : 'the number is out of range';
    }
    case 'date':
      return isFhirDate(text) ? { valueDate: text } : 'enter a date (YYYY-MM-DD)';
    case 'dateTime': {
      const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2}(\.\d+)?)?$/.exec(text);
      const value = m ? `${m[1]}T${m[2]}${m[3] ?? ':00'}${OFFSET.test(tz) ? tz : 'Z'}` : text;
      return isFhirDateTime(value) && value.includes('T')
        ? { valueDateTime: value }
        : 'enter a date and time';
    }
    case 'time': {
      const m = /^(\d{2}:\d{2})(:\d{2})?$/.exec(text);
      return m ? { valueTime: `${m[1]}${m[2] ?? ':00'}` } : 'enter a time (hh:mm)';
    }
    case 'url':
      return { valueUri: text };
    case 'coding':
      return { valueCoding: { code: text } };
    default:
      return { valueString: raw.replace(/\r\n/g, '\n') };
  }
};

/** Options of {@link buildItems}. */
export interface BuildOptions {
  /** Choices per linkId (answerOption or expanded answerValueSet). */
  readonly choices: ReadonlyMap<string, readonly Choice[]>;
  /** The response's current items: answers of types without inputs are kept from here. */
  readonly existing?: readonly QuestionnaireResponseItem[];
}

/** The result of {@link buildItems}. */
export interface BuiltItems {
  readonly items: QuestionnaireResponseItem[];
  /** Field problems per linkId (values that are not valid for the item's type). */
  readonly errors: Map<string, string[]>;
}

const normalisedValues = (
  items: readonly QuestionnaireItem[] | undefined,
  body: FormBody,
  choices: ReadonlyMap<string, readonly Choice[]>,
  tz: string,
): Values => {
  const values = new Map<string, (string | number | boolean)[]>();
  const walk = (list: readonly QuestionnaireItem[] | undefined) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      const answers = valuesOf(body, `q:${item.linkId}`)
        .map((raw) => answerOf(item, raw, choices.get(item.linkId), tz))
        .filter((a): a is QuestionnaireResponseAnswer => a !== null && typeof a !== 'string')
        .map((a) => normaliseValue(a, 'value'))
        .filter((v) => v !== undefined);
      values.set(item.linkId, answers);
      walk(item.item);
    }
  };
  walk(items);
  return Object.fromEntries(values);
};

const findExisting = (
  existing: readonly QuestionnaireResponseItem[] | undefined,
  linkId: string,
): QuestionnaireResponseItem | undefined => {
  for (const r of existing ?? []) {
    if (r.linkId === linkId) return r;
    const inner =
      findExisting(r.item, linkId) ??
      findExisting(
        r.answer?.flatMap((a) => a.item ?? []),
        linkId,
      );
    if (inner) return inner;
  }
  return undefined;
};

/**
 * Builds the response items from a submitted form: Questionnaire order, groups with their
 * children, empty answers dropped (and items left without answers), answers of disabled items
 * (enableWhen over the submitted values) ignored, a non-repeating question keeps its first value.
 * Answers of item types without inputs (attachment, reference, quantity) and of `readOnly` items
 * are kept from `existing`.
 */
export const buildItems = (
  questionnaireItems: readonly QuestionnaireItem[] | undefined,
  body: FormBody,
  options: BuildOptions,
): BuiltItems => {
  const tz = valuesOf(body, 'cb:tz')[0] ?? 'Z';
  const errors = new Map<string, string[]>();
  const enabled = evaluateEnableWhen(
    rulesOf(questionnaireItems),
    normalisedValues(questionnaireItems, body, options.choices, tz),
  );
  const fail = (linkId: string, message: string) =>
    errors.set(linkId, [...(errors.get(linkId) ?? []), message]);

  /** `instance`: inside the k-th instance of a repeating group, take the k-th value of each field. */
  const build = (list: readonly QuestionnaireItem[] | undefined, instance: number | undefined) => {
    const out: QuestionnaireResponseItem[] = [];
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string' || item.type === 'display') continue;
      if (enabled[item.linkId] === false) continue;
      if (item.type === 'group') {
        if (item.repeats === true && instance === undefined) {
          const count = valuesOf(body, `n:${item.linkId}`).length;
          for (let k = 0; k < count; k++) {
            const children = build(item.item, k);
            if (children.length > 0) out.push({ linkId: item.linkId, ...text(item), item: children });
          }
          continue;
        }
        const children = build(item.item, instance);
        if (children.length > 0) out.push({ linkId: item.linkId, ...text(item), item: children });
        continue;
      }
      // Items without inputs, and Questionnaire `readOnly` items, keep their stored answers: the
      // server, not the page, guarantees a read-only answer is never changed by a form post.
      if (!EDITABLE_TYPES.has(item.type) || item.readOnly === true) {
        const kept = findExisting(options.existing, item.linkId);
        if (kept?.answer?.length) out.push({ linkId: item.linkId, ...text(item), answer: kept.answer });
        continue;
      }
      const all = valuesOf(body, `q:${item.linkId}`);
      const raws = instance === undefined ? all : all[instance] !== undefined ? [all[instance]!] : [];
      const answers: QuestionnaireResponseAnswer[] = [];
      for (const raw of raws) {
        const answer = answerOf(item, raw, options.choices.get(item.linkId), tz);
        if (answer === null) continue;
        if (typeof answer === 'string') fail(item.linkId, answer);
        else if (!answers.some((a) => JSON.stringify(a) === JSON.stringify(answer))) answers.push(answer);
      }
      const kept = item.repeats === true ? answers : answers.slice(0, 1);
      // Child questions of a question (answer.item) are not edited here; they ride on the first answer.
      const nested = item.item?.length ? build(item.item, instance) : [];
      if (kept.length > 0 && nested.length > 0) kept[0] = { ...kept[0], item: nested };
      if (kept.length > 0) out.push({ linkId: item.linkId, ...text(item), answer: kept });
    }
    return out;
  };
  return { items: build(questionnaireItems, undefined), errors };
};

const text = (item: QuestionnaireItem): { text?: string } =>
  typeof item.text === 'string' ? { text: item.text } : {};

/** All items of a Questionnaire by linkId. */
export const itemsByLinkId = (
  items: readonly QuestionnaireItem[] | undefined,
): Map<string, QuestionnaireItem> => {
  const map = new Map<string, QuestionnaireItem>();
  const walk = (list: readonly QuestionnaireItem[] | undefined) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      map.set(item.linkId, item);
      walk(item.item);
    }
  };
  walk(items);
  return map;
};

/**
 * The linkId a validation issue is about: walks `QuestionnaireResponse.item[1].item[0].answer[0]…`
 * through the response.
 */
export const linkIdOfExpression = (
  expression: string,
  items: readonly QuestionnaireResponseItem[] | undefined,
): string | undefined => {
  let current: { item?: QuestionnaireResponseItem[]; answer?: QuestionnaireResponseAnswer[] } = {
    item: items ? [...items] : [],
  };
  let linkId: string | undefined;
  for (const [, part, index] of expression.matchAll(/\.(item|answer)\[(\d+)\]/g)) {
    const next: unknown = (current as Record<string, unknown[] | undefined>)[part!]?.[Number(index)];
    if (!next || typeof next !== 'object') break;
    if (part === 'item') linkId = (next as QuestionnaireResponseItem).linkId;
    current = next as typeof current;
  }
  return linkId;
};

/**
 * Required questions left unanswered where their enclosing groups are absent from the response
 * (validateResponse checks required items only inside the groups that are present; the form shows
 * every group, so the clinician expects the marker to hold). Questions inside repeating groups and
 * disabled items (enableWhen over the response's answers) are left to validateResponse.
 */
export const missingRequired = (
  questionnaireItems: readonly QuestionnaireItem[] | undefined,
  responseItems: readonly QuestionnaireResponseItem[] | undefined,
): string[] => {
  const answered = new Set<string>();
  const present = new Set<string>();
  const values = new Map<string, (string | number | boolean)[]>();
  const collect = (list: readonly QuestionnaireResponseItem[] | undefined) => {
    for (const r of list ?? []) {
      present.add(r.linkId);
      if (r.answer?.length) {
        answered.add(r.linkId);
        values.set(r.linkId, [
          ...(values.get(r.linkId) ?? []),
          ...r.answer.map((a) => normaliseValue(a, 'value')).filter((v) => v !== undefined),
        ]);
      }
      collect(r.item);
      for (const a of r.answer ?? []) collect(a.item);
    }
  };
  collect(responseItems);
  const enabled = evaluateEnableWhen(rulesOf(questionnaireItems), Object.fromEntries(values));
  const missing: string[] = [];
  const walk = (list: readonly QuestionnaireItem[] | undefined, parentPresent: boolean) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string' || enabled[item.linkId] === false) continue;
      if (item.type === 'group') {
        if (item.repeats !== true) walk(item.item, present.has(item.linkId));
        continue;
      }
      // Inside a present group validateResponse reports it (with its own expression).
      if (item.required === true && item.type !== 'display' && !parentPresent && !answered.has(item.linkId))
        missing.push(item.linkId);
    }
  };
  walk(questionnaireItems, false);
  return missing;
};
