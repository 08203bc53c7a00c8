/**
 * HTML of a Questionnaire with a response's answers (issues 5, 32 report editor), pure.
 *
 * Conventions the browser code (src/http/app/browser/) and the tests rely on: each item's wrapper
 * has `data-linkid`, `data-type` and `data-key` (the form engine's node key, src/sdc/engine/tree.ts:
 * `nodule[1]/nodule-size`); an instance of a repeating group is a `fieldset.instance`; each input
 * is named `q:<linkId>` (a quantity's unit `u:<linkId>`); errors are `.field-error` inside the
 * wrapper; a unit is a `.unit` element beside its input; a calculated value is the `output` of its
 * wrapper; read-only answers are `.answer-readonly`.
 */
import { arrayOf, extensionValue, unitOf, unitText } from '../../sdc/engine/extensions.js';
import { instanceKey } from '../../sdc/engine/tree.js';
import type {
  QuestionnaireItem,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../../sdc/types.js';
import {
  type Choice,
  choiceValueOf,
  hasField,
  inputValueOf,
  isCalculated,
  quantityUnits,
  shownAnswer,
  unitValue,
  unitValueOf,
} from './form-data.js';
import { itemAnchor } from './item-anchor.js';
import { escapeHtml } from './layout.js';
import { humanDateTime } from './report-view.js';

/** Options of {@link renderItems}. */
export interface RenderOptions {
  readonly readonly: boolean;
  readonly choices: ReadonlyMap<string, readonly Choice[]>;
  /** Messages per node key, shown next to the field. */
  readonly errors: ReadonlyMap<string, readonly string[]>;
  /** Enablement per key, as the engine decided it (disabled items start hidden). */
  readonly enabled: ReadonlyMap<string, boolean>;
  /** Read-only: unanswered questions are rendered `hidden` (the view's switch shows them). */
  readonly hideEmpty?: boolean;
}

export { itemAnchor };

const attr = (value: string) => escapeHtml(value);

const ITEM_CONTROL = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-itemControl';

/** A display item marked as its parent's help (SDC itemControl `help`). */
export const isHelpItem = (item: QuestionnaireItem): boolean => {
  if (item.type !== 'display') return false;
  const concept = extensionValue(item, ITEM_CONTROL)?.[1] as { coding?: unknown } | undefined;
  return arrayOf<{ code?: unknown }>(concept?.coding).some((c) => c?.code === 'help');
};

/** The response items of one scope, the key prefix, and whether it is an instance of a repeating group. */
interface Scope {
  readonly items: readonly QuestionnaireResponseItem[];
  readonly prefix: string;
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

  /** Ids of the help texts of the field being rendered (aria-describedby). */
  let helpIds: readonly string[] = [];
  const errorsOf = (key: string, fieldId: string, describe: readonly string[] = []) => {
    const messages = options.errors.get(key) ?? [];
    const ids = [...(messages.length > 0 ? [`${fieldId}-err`] : []), ...describe, ...helpIds];
    return {
      html: messages.map((m) => `<p class="field-error" id="${fieldId}-err">${escapeHtml(m)}</p>`).join(''),
      describedBy:
        (ids.length > 0 ? ` aria-describedby="${ids.join(' ')}"` : '') +
        (messages.length > 0 ? ' aria-invalid="true"' : ''),
    };
  };

  const labelText = (item: QuestionnaireItem) =>
    `${escapeHtml(typeof item.text === 'string' && item.text ? item.text : item.linkId)}${
      item.required === true && !options.readonly ? ' <span class="req" title="required">*</span>' : ''
    }`;

  const wrapperStart = (item: QuestionnaireItem, key: string, extraClass = '', tag = 'div') =>
    `<${tag} class="item item-${attr(item.type)}${extraClass}" data-linkid="${attr(item.linkId)}" data-type="${attr(item.type)}" data-key="${attr(key)}" id="${itemAnchor(key)}"${
      options.enabled.get(key) === false ? ' hidden' : ''
    }>`;

  const answersIn = (scope: Scope, linkId: string): QuestionnaireResponseAnswer[] =>
    scope.items.find((r) => r.linkId === linkId)?.answer ?? [];

  const unitOfItem = (item: QuestionnaireItem): string =>
    item.type === 'decimal' || item.type === 'integer' ? unitText(unitOf(item)) : '';

  const renderReadonly = (
    item: QuestionnaireItem,
    key: string,
    answers: QuestionnaireResponseAnswer[],
    note = '',
  ) => {
    const shown = answers
      .map((a) => {
        const text = shownAnswer(item, a, options.choices.get(item.linkId));
        // Dates and times for people, not raw ISO (issue 32).
        const raw = a.valueDateTime ?? a.valueDate;
        return typeof raw === 'string' && text === raw ? humanDateTime(raw) : text;
      })
      .filter((t) => t !== '');
    // issue 32: the read-only view leaves unanswered questions out unless asked to show them.
    const start =
      shown.length === 0 && options.hideEmpty
        ? wrapperStart(item, key, ' unanswered').replace(/(?<! hidden)>$/, ' hidden>')
        : wrapperStart(item, key);
    return `${start}<div class="q-label">${labelText(item)}</div>${note}${
      shown.length > 0
        ? shown.map((t) => `<div class="answer-readonly">${escapeHtml(t)}</div>`).join('')
        : '<div class="answer-readonly empty">—</div>'
    }`;
  };

  const textInput = (item: QuestionnaireItem, id: string, value: string, described: string) => {
    const name = `q:${attr(item.linkId)}`;
    const common = `id="${id}" name="${name}"${described}${item.required === true ? ' aria-required="true"' : ''}`;
    const max = typeof item.maxLength === 'number' ? ` maxlength="${item.maxLength}"` : '';
    switch (item.type) {
      case 'text':
        return `<textarea ${common} rows="4"${max}>${escapeHtml(value)}</textarea>`;
      case 'integer':
        return `<input type="text" inputmode="numeric" ${common} value="${attr(value)}">`;
      case 'decimal':
      case 'quantity':
        return `<input type="text" inputmode="decimal" ${common} value="${attr(value)}">`;
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

  /** A number field with its unit beside it: a fixed unit as text, several as a select. */
  const numberWithUnit = (
    item: QuestionnaireItem,
    id: string,
    answer: QuestionnaireResponseAnswer | undefined,
    errorKey: string,
  ) => {
    const units = item.type === 'quantity' ? quantityUnits(item) : [];
    const fixed =
      item.type === 'quantity' ? (units.length === 1 ? unitText(units[0]) : '') : unitOfItem(item);
    const unitId = `${id}-unit`;
    const { html: errorHtml, describedBy } = errorsOf(errorKey, id, fixed ? [unitId] : []);
    const value = answer ? inputValueOf(item.type, answer) : '';
    const unitHtml =
      units.length > 1
        ? `<select id="${unitId}" name="u:${attr(item.linkId)}" aria-label="Unit of ${attr(String(item.text ?? item.linkId))}" class="unit-select">${units
            .map((u) => {
              const v = unitValue(u);
              return `<option value="${attr(v)}"${unitValueOf(item, answer) === v ? ' selected' : ''}>${escapeHtml(unitText(u))}</option>`;
            })
            .join('')}</select>`
        : fixed
          ? `<span class="unit" id="${unitId}">${escapeHtml(fixed)}</span>`
          : '';
    return `${errorHtml}<span class="with-unit">${textInput(item, id, value, describedBy)}${unitHtml}</span>`;
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

  const renderCalculated = (item: QuestionnaireItem, key: string, answers: QuestionnaireResponseAnswer[]) => {
    const id = nextId();
    const shown = answers.map((a) => shownAnswer(item, a, undefined)).filter(Boolean);
    return `${wrapperStart(item, key, ' calculated')}<span class="q-label" id="${id}-label">${labelText(item)}</span><output id="${id}" class="calculated-value" aria-labelledby="${id}-label" aria-describedby="${id}-how">${
      shown.length > 0 ? escapeHtml(shown.join(', ')) : '—'
    }</output> <span class="hint" id="${id}-how">calculated</span>`;
  };

  const renderQuestion = (item: QuestionnaireItem, scope: Scope): string => {
    const key = `${scope.prefix}${item.linkId}`;
    const answers = answersIn(scope, item.linkId);
    const choices =
      item.type === 'boolean'
        ? [
            { value: 'true', label: 'Yes', answer: { valueBoolean: true } },
            { value: 'false', label: 'No', answer: { valueBoolean: false } },
          ]
        : options.choices.get(item.linkId);
    const children = renderChildren(item, scope, false);
    if (!options.readonly && isCalculated(item))
      return `${renderCalculated(item, key, answers)}${children}</div>`;
    // A Questionnaire `readOnly` item (e.g. populated patient data) is shown, never edited.
    if (options.readonly || !hasField(item, choices)) {
      const unavailable =
        !options.readonly && item.type === 'coding' && (choices?.length ?? 0) === 0
          ? '<p class="hint">The list of answers for this question is not available; the answer is kept as it is.</p>'
          : '';
      return `${renderReadonly(item, key, answers, unavailable)}${children}</div>`;
    }
    const id = nextId();
    const name = `q:${attr(item.linkId)}`;
    // Help texts sit under the label and describe the field (WCAG 1.3.1, 3.3.2).
    const helps = (item.item ?? []).filter(isHelpItem);
    helpIds = helps.map((_, i) => `${id}-help${i}`);
    const helpHtml = helps
      .map((h, i) => `<p class="help" id="${id}-help${i}">${escapeHtml(String(h.text ?? ''))}</p>`)
      .join('');
    let control: string;
    if (choices && choices.length > 0) {
      const { html: errorHtml, describedBy } = errorsOf(key, id);
      const selected = answers
        .map((a) => choiceValueOf(choices, a))
        .filter((v): v is string => v !== undefined);
      const other =
        item.answerConstraint === 'optionsOrString'
          ? answers
              .filter((a) => choiceValueOf(choices, a) === undefined)
              .map((a) => shownAnswer(item, a, undefined))[0]
          : undefined;
      if (scope.instance || (choices.length > 6 && item.repeats !== true)) {
        control = `<label class="q-label" for="${id}">${labelText(item)}</label>${errorHtml}${selectInput(item, id, choices, selected[0], describedBy)}${
          item.answerConstraint === 'optionsOrString'
            ? `<label class="other" for="${id}-other">Other <input type="text" id="${id}-other" name="${name}" value="${attr(other ?? '')}"></label>`
            : ''
        }`;
      } else {
        const kind = item.repeats === true ? 'checkbox' : 'radio';
        control = `<fieldset class="choices" id="${id}"${describedBy}><legend class="q-label">${labelText(item)}</legend>${errorHtml}<div class="options${choices.length <= 4 && kind === 'radio' ? ' inline' : ''}">${choices
          .map((c, i) => {
            const optionId = `${id}-${i}`;
            return `<label class="option" for="${optionId}"><input type="${kind}" id="${optionId}" name="${name}" value="${attr(c.value)}"${
              selected.includes(c.value) ? ' checked' : ''
            }> <span>${escapeHtml(c.label)}</span></label>`;
          })
          .join('')}</div>${
          item.answerConstraint === 'optionsOrString'
            ? `<label class="other" for="${id}-other">Other <input type="text" id="${id}-other" name="${name}" value="${attr(other ?? '')}"></label>`
            : ''
        }</fieldset>`;
      }
    } else if (item.repeats === true && !scope.instance) {
      const { html: errorHtml, describedBy } = errorsOf(key, id);
      const values = answers.map((a) => inputValueOf(item.type, a));
      if (values.length === 0) values.push('');
      control = `<label class="q-label" for="${id}">${labelText(item)}</label>${errorHtml}<div class="repeats" data-repeats="${attr(item.linkId)}">${values
        .map((v, i) => {
          const fieldId = i === 0 ? id : `${id}-${i}`;
          return `<div class="repeat-row">${
            i === 0
              ? ''
              : `<label class="visually-hidden" for="${fieldId}">${escapeHtml(item.text ?? item.linkId)} (${i + 1})</label>`
          }${textInput(item, fieldId, v, describedBy)}${removeButton(String(item.text ?? item.linkId))}</div>`;
        })
        .join(
          '',
        )}</div><button type="button" class="secondary add-answer" data-add-answer="${attr(item.linkId)}">Add another</button>`;
    } else if (item.type === 'quantity' || unitOfItem(item)) {
      control = `<label class="q-label" for="${id}">${labelText(item)}</label>${numberWithUnit(item, id, answers[0], key)}`;
    } else {
      const { html: errorHtml, describedBy } = errorsOf(key, id);
      const value = answers[0] ? inputValueOf(item.type, answers[0]) : '';
      control = `<label class="q-label" for="${id}">${labelText(item)}</label>${errorHtml}${textInput(item, id, value, describedBy)}`;
    }
    helpIds = [];
    if (helpHtml) {
      const at = control.search(/<\/(?:label|legend)>/);
      const end = at < 0 ? 0 : control.indexOf('>', at) + 1;
      control = `${control.slice(0, end)}${helpHtml}${control.slice(end)}`;
    }
    return `${wrapperStart(item, key)}${control}${renderChildren(item, scope, true)}</div>`;
  };

  const renderChildren = (item: QuestionnaireItem, scope: Scope, helpShown: boolean): string => {
    const shown = (item.item ?? []).filter((c) => !(helpShown && isHelpItem(c)));
    if (shown.length === 0) return '';
    const own = scope.items.find((r) => r.linkId === item.linkId);
    const inner: Scope = {
      items: own?.answer?.[0]?.item ?? [],
      prefix: `${instanceKey(scope.prefix, item.linkId, 0)}/`,
      instance: scope.instance,
    };
    return `<div class="children">${shown.map((c) => renderItem(c, inner)).join('')}</div>`;
  };

  const renderItem = (item: QuestionnaireItem, scope: Scope): string => {
    if (typeof item?.linkId !== 'string') return '';
    const key = `${scope.prefix}${item.linkId}`;
    if (item.type === 'display')
      return `${wrapperStart(item, key)}<p class="display">${escapeHtml(String(item.text ?? ''))}</p></div>`;
    if (item.type !== 'group') return renderQuestion(item, scope);
    const legend = `<legend>${labelText(item)}</legend>`;
    const numbered = (k: number, of: number) =>
      `<legend>${escapeHtml(typeof item.text === 'string' && item.text ? item.text : item.linkId)}<span class="instance-number">${of > 1 ? ` ${k + 1}` : ''}</span>${
        item.required === true && !options.readonly ? ' <span class="req" title="required">*</span>' : ''
      }</legend>`;
    const groupErrors = (options.errors.get(key) ?? [])
      .map((m) => `<p class="field-error">${escapeHtml(m)}</p>`)
      .join('');
    const instances = scope.items.filter((r) => r.linkId === item.linkId);
    if (item.repeats === true && !scope.instance) {
      if (instances.length === 0) instances.push({ linkId: item.linkId });
      const body = instances
        .map((instance, k) => {
          const instanceKeyText = instanceKey(scope.prefix, item.linkId, k);
          const inner: Scope = { items: instance.item ?? [], prefix: `${instanceKeyText}/`, instance: true };
          const errors = (options.errors.get(instanceKeyText) ?? [])
            .map((m) => `<p class="field-error">${escapeHtml(m)}</p>`)
            .join('');
          return `<fieldset class="group instance" data-linkid="${attr(item.linkId)}" data-key="${attr(instanceKeyText)}" id="${itemAnchor(instanceKeyText)}"${
            options.enabled.get(instanceKeyText) === false ? ' hidden' : ''
          }>${numbered(k, instances.length)}${errors}${
            options.readonly ? '' : `<input type="hidden" name="n:${attr(item.linkId)}" value="1">`
          }${(item.item ?? []).map((c) => renderItem(c, inner)).join('')}${removeButton(
            String(item.text ?? item.linkId),
            k,
          )}</fieldset>`;
        })
        .join('');
      return `${wrapperStart(item, key, ' group-repeat')}${groupErrors}<div class="instances">${body}</div>${
        options.readonly
          ? ''
          : `<button type="button" class="secondary add-group" data-add-group="${attr(item.linkId)}">Add another ${escapeHtml(String(item.text ?? ''))}</button>`
      }</div>`;
    }
    const inner: Scope = { items: instances[0]?.item ?? [], prefix: scope.prefix, instance: scope.instance };
    return `${wrapperStart(item, key, ' group', 'fieldset')}${legend}${groupErrors}${(item.item ?? [])
      .map((c) => renderItem(c, inner))
      .join('')}</fieldset>`;
  };

  /**
   * The Remove button of a repeat instance or answer row (src/http/app/browser/editor.ts names
   * and shows it; without script it stays hidden, as nothing could remove the row).
   */
  const removeButton = (label: string, k = 0): string =>
    options.readonly
      ? ''
      : `<button type="button" class="secondary remove-row" data-label="${attr(label)}" aria-label="${attr(`Remove ${label} ${k + 1}`)}" hidden>Remove</button>`;

  const root: Scope = { items: responseItems ?? [], prefix: '', instance: false };
  return (items ?? []).map((item) => renderItem(item, root)).join('');
};

/** JSON for a `<script type="application/json">` block (no `</script>` breakout). */
export const scriptJson = (value: unknown): string =>
  JSON.stringify(value).replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/&/g, '\\u0026');
