/**
 * HTML of a Questionnaire with a response's answers (issue 5 report editor), pure. Conventions the
 * browser tests rely on: each item wrapper has `data-linkid`; each input is named `q:<linkId>`;
 * errors are `.field-error` inside the wrapper; read-only answers are `.answer-readonly`.
 */
import type {
  QuestionnaireItem,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../../sdc/types.js';
import { normaliseValue, rulesOf } from './enable-when.js';
import { type Choice, choiceValueOf, EDITABLE_TYPES, inputValueOf } from './form-data.js';
import { escapeHtml } from './layout.js';

/** Options of {@link renderItems}. */
export interface RenderOptions {
  readonly readonly: boolean;
  readonly choices: ReadonlyMap<string, readonly Choice[]>;
  /** Messages per linkId, shown next to the field. */
  readonly errors: ReadonlyMap<string, readonly string[]>;
  /** linkId → enabled, as evaluated on the current answers (disabled items start hidden). */
  readonly enabled: Readonly<Record<string, boolean>>;
}

/** Answers of the response per linkId (all instances, in order). */
export const answersByLinkId = (
  items: readonly QuestionnaireResponseItem[] | undefined,
): Map<string, QuestionnaireResponseAnswer[]> => {
  const map = new Map<string, QuestionnaireResponseAnswer[]>();
  const walk = (list: readonly QuestionnaireResponseItem[] | undefined) => {
    for (const r of list ?? []) {
      if (typeof r?.linkId !== 'string') continue;
      if (Array.isArray(r.answer)) {
        map.set(r.linkId, [...(map.get(r.linkId) ?? []), ...r.answer]);
        for (const a of r.answer) walk(a.item);
      }
      walk(r.item);
    }
  };
  walk(items);
  return map;
};

/** The DOM id of an item's wrapper (for the error summary's links). */
export const itemAnchor = (linkId: string): string => `item-${linkId.replace(/[^A-Za-z0-9_-]/g, '_')}`;

const attr = (value: string) => escapeHtml(value);

/** Shows an answer as text (read-only mode and types without inputs). */
export const answerText = (
  answer: QuestionnaireResponseAnswer,
  choices: readonly Choice[] | undefined,
): string => {
  if (choices) {
    const value = choiceValueOf(choices, answer);
    const choice = choices.find((c) => c.value === value);
    if (choice) return choice.label;
  }
  for (const [key, value] of Object.entries(answer)) {
    if (!key.startsWith('value')) continue;
    if (typeof value === 'boolean') return value ? 'Yes' : 'No';
    if (typeof value === 'string' || typeof value === 'number') return String(value);
    if (value && typeof value === 'object') {
      const v = value as Record<string, unknown>;
      if (key === 'valueCoding') return String(v.display ?? v.code ?? '');
      if (key === 'valueQuantity') return `${v.value ?? ''} ${v.unit ?? v.code ?? ''}`.trim();
      if (key === 'valueReference') return String(v.display ?? v.reference ?? '');
      if (key === 'valueAttachment') return String(v.title ?? v.url ?? 'attachment');
    }
  }
  return '';
};

interface Scope {
  readonly answers: Map<string, QuestionnaireResponseAnswer[]>;
  /** In instance k of a repeating group: the instance's own answers. */
  readonly instance: boolean;
}

/** Renders the items (no `<form>` around them). */
export const renderItems = (
  items: readonly QuestionnaireItem[] | undefined,
  responseItems: readonly QuestionnaireResponseItem[] | undefined,
  options: RenderOptions,
): string => {
  let counter = 0;
  const nextId = () => `f${++counter}`;

  const errorsOf = (linkId: string, fieldId: string) => {
    const messages = options.errors.get(linkId) ?? [];
    return {
      html: messages.map((m) => `<p class="field-error" id="${fieldId}-err">${escapeHtml(m)}</p>`).join(''),
      describedBy: messages.length > 0 ? ` aria-describedby="${fieldId}-err" aria-invalid="true"` : '',
    };
  };

  const labelText = (item: QuestionnaireItem) =>
    `${escapeHtml(typeof item.text === 'string' && item.text ? item.text : item.linkId)}${
      item.required === true && !options.readonly ? ' <span class="req" title="required">*</span>' : ''
    }`;

  const wrapperStart = (item: QuestionnaireItem, extraClass = '', tag = 'div') =>
    `<${tag} class="item item-${attr(item.type)}${extraClass}" data-linkid="${attr(item.linkId)}" data-type="${attr(item.type)}" id="${itemAnchor(item.linkId)}"${
      options.enabled[item.linkId] === false ? ' hidden' : ''
    }>`;

  const renderReadonly = (item: QuestionnaireItem, answers: QuestionnaireResponseAnswer[]) => {
    const shown = answers.map((a) => answerText(a, options.choices.get(item.linkId))).filter((t) => t !== '');
    return `${wrapperStart(item)}<div class="q-label">${labelText(item)}</div>${
      shown.length > 0
        ? shown.map((t) => `<div class="answer-readonly">${escapeHtml(t)}</div>`).join('')
        : '<div class="answer-readonly empty">—</div>'
    }</div>`;
  };

  const textInput = (item: QuestionnaireItem, id: string, value: string, described: string) => {
    const name = `q:${attr(item.linkId)}`;
    const common = `id="${id}" name="${name}"${described}${item.required === true ? ' aria-required="true"' : ''}${
      item.readOnly === true ? ' readonly' : ''
    }`;
    const max = typeof item.maxLength === 'number' ? ` maxlength="${item.maxLength}"` : '';
    switch (item.type) {
      case 'text':
        return `<textarea ${common} rows="4"${max}>${escapeHtml(value)}</textarea>`;
      case 'integer':
        return `<input type="number" step="1" inputmode="numeric" ${common} value="${attr(value)}">`;
      case 'decimal':
        return `<input type="number" step="any" inputmode="decimal" ${common} value="${attr(value)}">`;
      case 'date':
        return `<input type="date" ${common} value="${attr(value)}">`;
      case 'dateTime':
        return `<input type="datetime-local" ${common} value="${attr(value)}">`;
      case 'time':
        return `<input type="time" step="1" ${common} value="${attr(value)}">`;
      case 'url':
        return `<input type="url" ${common} value="${attr(value)}"${max}>`;
      default:
        return `<input type="text" ${common} value="${attr(value)}"${max}>`;
    }
  };

  const selectInput = (
    item: QuestionnaireItem,
    id: string,
    choices: readonly Choice[],
    selected: string | undefined,
    described: string,
  ) =>
    `<select id="${id}" name="q:${attr(item.linkId)}"${described}${item.required === true ? ' aria-required="true"' : ''}><option value="">—</option>${choices
      .map(
        (c) =>
          `<option value="${attr(c.value)}"${c.value === selected ? ' selected' : ''}>${escapeHtml(c.label)}</option>`,
      )
      .join('')}</select>`;

  const renderQuestion = (item: QuestionnaireItem, scope: Scope): string => {
    const answers = scope.answers.get(item.linkId) ?? [];
    // A Questionnaire `readOnly` item (e.g. populated patient data) is shown, never edited.
    if (options.readonly || item.readOnly === true || !EDITABLE_TYPES.has(item.type)) {
      const html = renderReadonly(item, answers);
      return html.replace(/<\/div>$/, `${renderChildren(item, scope)}</div>`);
    }
    const id = nextId();
    const { html: errorHtml, describedBy } = errorsOf(item.linkId, id);
    const choices =
      item.type === 'boolean'
        ? [
            { value: 'true', label: 'Yes', answer: { valueBoolean: true } },
            { value: 'false', label: 'No', answer: { valueBoolean: false } },
          ]
        : options.choices.get(item.linkId);
    const name = `q:${attr(item.linkId)}`;
    let control: string;
    if (choices && choices.length > 0) {
      const selected = answers
        .map((a) => choiceValueOf(choices, a))
        .filter((v): v is string => v !== undefined);
      const other =
        item.answerConstraint === 'optionsOrString'
          ? answers
              .filter((a) => choiceValueOf(choices, a) === undefined)
              .map((a) => answerText(a, undefined))[0]
          : undefined;
      if (scope.instance || (choices.length > 6 && item.repeats !== true)) {
        control = `<label class="q-label" for="${id}">${labelText(item)}</label>${errorHtml}${selectInput(item, id, choices, selected[0], describedBy)}`;
      } else {
        const kind = item.repeats === true ? 'checkbox' : 'radio';
        control = `<fieldset class="choices" id="${id}"${describedBy}><legend class="q-label">${labelText(item)}</legend>${errorHtml}<div class="options${choices.length <= 4 && kind === 'radio' ? ' inline' : ''}">${choices
          .map((c, i) => {
            const optionId = `${id}-${i}`;
            return `<label class="option" for="${optionId}"><input type="${kind}" id="${optionId}" name="${name}" value="${attr(c.value)}"${
              selected.includes(c.value) ? ' checked' : ''
            }${item.readOnly === true ? ' disabled' : ''}> <span>${escapeHtml(c.label)}</span></label>`;
          })
          .join('')}</div>${
          item.answerConstraint === 'optionsOrString'
            ? `<label class="other" for="${id}-other">Other <input type="text" id="${id}-other" name="${name}" value="${attr(other ?? '')}"></label>`
            : ''
        }</fieldset>`;
      }
    } else if (item.repeats === true && !scope.instance) {
      const values = answers.map((a) => inputValueOf(item.type, a));
      if (values.length === 0) values.push('');
      control = `<label class="q-label" for="${id}">${labelText(item)}</label>${errorHtml}<div class="repeats" data-repeats="${attr(item.linkId)}">${values
        .map((v, i) => {
          const fieldId = i === 0 ? id : `${id}-${i}`;
          return `<div class="repeat-row">${
            i === 0
              ? ''
              : `<label class="visually-hidden" for="${fieldId}">${escapeHtml(item.text ?? item.linkId)} (${i + 1})</label>`
          }${textInput(item, fieldId, v, describedBy)}</div>`;
        })
        .join(
          '',
        )}</div><button type="button" class="secondary add-answer" data-add-answer="${attr(item.linkId)}">Add another</button>`;
    } else {
      const value = answers[0] ? inputValueOf(item.type, answers[0]) : '';
      control = `<label class="q-label" for="${id}">${labelText(item)}</label>${errorHtml}${textInput(item, id, value, describedBy)}`;
    }
    return `${wrapperStart(item)}${control}${renderChildren(item, scope)}</div>`;
  };

  const renderChildren = (item: QuestionnaireItem, scope: Scope): string =>
    item.item?.length
      ? `<div class="children">${item.item.map((c) => renderItem(c, scope)).join('')}</div>`
      : '';

  const renderItem = (item: QuestionnaireItem, scope: Scope): string => {
    if (typeof item?.linkId !== 'string') return '';
    if (item.type === 'display')
      return `${wrapperStart(item)}<p class="display">${escapeHtml(String(item.text ?? ''))}</p></div>`;
    if (item.type !== 'group') return renderQuestion(item, scope);
    const legend = `<legend>${labelText(item)}</legend>`;
    const groupErrors = (options.errors.get(item.linkId) ?? [])
      .map((m) => `<p class="field-error">${escapeHtml(m)}</p>`)
      .join('');
    if (item.repeats === true && !scope.instance) {
      const instances = instancesOf(item.linkId);
      if (instances.length === 0) instances.push({ linkId: item.linkId });
      const body = instances
        .map((instance) => {
          const inner: Scope = { answers: answersByLinkId(instance.item), instance: true };
          return `<fieldset class="group instance" data-linkid="${attr(item.linkId)}">${legend}${
            options.readonly ? '' : `<input type="hidden" name="n:${attr(item.linkId)}" value="1">`
          }${(item.item ?? []).map((c) => renderItem(c, inner)).join('')}</fieldset>`;
        })
        .join('');
      return `${wrapperStart(item, ' group-repeat')}${groupErrors}<div class="instances">${body}</div>${
        options.readonly
          ? ''
          : `<button type="button" class="secondary add-group" data-add-group="${attr(item.linkId)}">Add another ${escapeHtml(String(item.text ?? ''))}</button>`
      }</div>`;
    }
    return `${wrapperStart(item, ' group', 'fieldset')}${legend}${groupErrors}${(item.item ?? [])
      .map((c) => renderItem(c, scope))
      .join('')}</fieldset>`;
  };

  const instancesOf = (linkId: string): QuestionnaireResponseItem[] => {
    const found: QuestionnaireResponseItem[] = [];
    const walk = (list: readonly QuestionnaireResponseItem[] | undefined) => {
      for (const r of list ?? []) {
        if (r.linkId === linkId) found.push(r);
        else {
          walk(r.item);
          for (const a of r.answer ?? []) walk(a.item);
        }
      }
    };
    walk(responseItems);
    return found;
  };

  const root: Scope = { answers: answersByLinkId(responseItems), instance: false };
  return (items ?? []).map((item) => renderItem(item, root)).join('');
};

/**
 * The data the editor script needs: enableWhen rules, and per question how a form value
 * normalises for comparison (choices: form value → normalised answer; others: the item type).
 */
export const editorData = (
  items: readonly QuestionnaireItem[] | undefined,
  choices: ReadonlyMap<string, readonly Choice[]>,
) => {
  // Maps, sent as objects of own keys: linkIds and choice values such as `__proto__` stay keys.
  const types = new Map<string, string>();
  const choiceValues = new Map<string, Record<string, string | number | boolean>>();
  const walk = (list: readonly QuestionnaireItem[] | undefined) => {
    for (const item of list ?? []) {
      if (typeof item?.linkId !== 'string') continue;
      types.set(item.linkId, item.type);
      const cs = choices.get(item.linkId);
      if (cs)
        choiceValues.set(
          item.linkId,
          Object.fromEntries(
            cs.flatMap((c) => {
              const v = normaliseValue(c.answer, 'value');
              return v === undefined ? [] : [[c.value, v] as const];
            }),
          ),
        );
      walk(item.item);
    }
  };
  walk(items);
  return {
    rules: rulesOf(items),
    types: Object.fromEntries(types),
    choices: Object.fromEntries(choiceValues),
  };
};

/** JSON for a `<script type="application/json">` block (no `</script>` breakout). */
export const scriptJson = (value: unknown): string =>
  JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026');
