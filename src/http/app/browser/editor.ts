/**
 * The report editor in the browser (issues 5, 32): the entry point of the editor's bundle
 * (src/http/app/assets.ts). The page works without it; with it:
 *
 * - the form engine runs in a Web Worker (engine-worker.ts, the server's own code) on every change:
 *   items show and hide (enableWhen, enableWhenExpression, per repeat instance), calculated values
 *   are rewritten beside their label, and each field's check is shown when the user leaves it —
 *   a message linked to the field (`aria-describedby`, `aria-invalid`) and announced in the page's
 *   status region; "An answer is required" only for a field the user changed (or the server named);
 * - repeating questions and groups get "Add another";
 * - dateTime answers carry the browser's UTC offset, and the error summary takes the focus.
 *
 * Fields are matched to the engine's nodes by key (src/sdc/engine/tree.ts), computed here from
 * the page's structure exactly as the server renders it (src/http/app/render.ts). Hidden fields
 * stay enabled and are posted (a repeat instance's fields are matched by position); the server's
 * engine leaves the answers of disabled items out, as the worker decided here.
 *
 * Other browser modules of the editor are imported here and started from {@link start}.
 */
import type { EditorData } from '../editor-form.js';
import { itemAnchor } from '../item-anchor.js';
import { EngineClient } from './engine-client.js';
import { startLongForm } from './long-form.js';
import type { EngineResult, Field } from './protocol.js';
import { startReportWork } from './report-work.js';

/** The `q:`/`n:`/`u:` controls of the form (inputs, selects, text areas). */
type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

const isControl = (el: Element): el is Control =>
  el instanceof HTMLInputElement || el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement;

const controlsOf = (root: HTMLFormElement): Control[] => [...root.elements].filter(isControl);

const FIELD_NAME = /^(?:q|n|u):|^cb:tz$/;

/** The browser's UTC offset as `+01:00` (dateTime answers are stored with it). */
const utcOffset = (): string => {
  const minutes = -new Date().getTimezoneOffset();
  const abs = Math.abs(minutes);
  return `${minutes >= 0 ? '+' : '-'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
};

/** The instances among an instance's siblings, in page order. */
const instanceIndex = (instance: Element): number =>
  [...(instance.parentElement?.children ?? [])]
    .filter((c) => c.matches('fieldset.instance'))
    .indexOf(instance);

/**
 * The engine's key of an item wrapper or repeat instance (src/sdc/engine/tree.ts): the instance
 * of each enclosing repeating group, and `linkId[0]` of a question whose children it is among.
 */
export const keyOf = (el: HTMLElement, form: HTMLElement): string => {
  const prefix: string[] = [];
  for (let at = el.parentElement; at && at !== form; at = at.parentElement) {
    if (at.matches('fieldset.instance[data-linkid]'))
      prefix.unshift(`${at.dataset.linkid}[${instanceIndex(at)}]/`);
    else if (at.matches('.children')) {
      const owner = at.parentElement?.closest<HTMLElement>('[data-linkid]');
      if (owner) prefix.unshift(`${owner.dataset.linkid}[0]/`);
    }
  }
  const own = el.matches('fieldset.instance')
    ? `${el.dataset.linkid}[${instanceIndex(el)}]`
    : (el.dataset.linkid ?? '');
  return `${prefix.join('')}${own}`;
};

/** Writes every wrapper's and instance's key into `data-key` (after instances were added). */
const refreshKeys = (form: HTMLFormElement): void => {
  for (const el of form.querySelectorAll<HTMLElement>('[data-linkid]')) el.dataset.key = keyOf(el, form);
};

/** The page's fields as the engine reads them: every named field, disabled ones included. */
const fieldsOf = (form: HTMLFormElement): Field[] =>
  controlsOf(form).flatMap((el): Field[] => {
    if (!FIELD_NAME.test(el.name)) return [];
    if (el instanceof HTMLInputElement && (el.type === 'radio' || el.type === 'checkbox') && !el.checked)
      return [];
    return [[el.name, el.value]];
  });

/** The wrapper's own elements (not those of items nested in it). */
const own = <T extends Element>(wrapper: HTMLElement, selector: string): T[] =>
  [...wrapper.querySelectorAll<T>(selector)].filter((el) => el.closest('[data-key]') === wrapper);

/** Where a wrapper's message goes and which element it describes. */
const fieldOf = (wrapper: HTMLElement): { described: HTMLElement; before: Element | null } | undefined => {
  const choices = own<HTMLFieldSetElement>(wrapper, 'fieldset.choices')[0];
  if (choices)
    return { described: choices, before: choices.querySelector('legend')?.nextElementSibling ?? null };
  const control = own<HTMLElement>(wrapper, 'input:not([type=hidden]), select, textarea')[0];
  if (!control) return undefined;
  return { described: control, before: control.closest('.with-unit') ?? control };
};

const labelOf = (wrapper: HTMLElement): string =>
  (wrapper.querySelector('.q-label, legend')?.textContent ?? '').replace(/\s*\*\s*$/, '').trim();

/** Shows `messages` at the wrapper's field (none: clears it); true when they changed. */
const showMessages = (wrapper: HTMLElement, messages: readonly string[]): boolean => {
  const existing = own<HTMLElement>(wrapper, '.field-error');
  if (existing.map((e) => e.textContent).join('\n') === messages.join('\n')) return false;
  const field = fieldOf(wrapper);
  for (const e of existing) e.remove();
  if (!field) return true;
  const errorId = `${field.described.id || wrapper.id}-err`;
  const describedBy = (field.described.getAttribute('aria-describedby') ?? '')
    .split(/\s+/)
    .filter((id) => id && id !== errorId);
  if (messages.length === 0) {
    field.described.removeAttribute('aria-invalid');
  } else {
    const p = document.createElement('p');
    p.className = 'field-error';
    p.id = errorId;
    p.textContent = messages.join(' ');
    field.before?.parentElement?.insertBefore(p, field.before);
    describedBy.unshift(errorId);
    field.described.setAttribute('aria-invalid', 'true');
  }
  if (describedBy.length > 0) field.described.setAttribute('aria-describedby', describedBy.join(' '));
  else field.described.removeAttribute('aria-describedby');
  return true;
};

/** The live form: the engine's results applied to the page. */
const liveForm = (form: HTMLFormElement, data: EditorData): (() => void) | undefined => {
  if (!data.worker || typeof Worker === 'undefined') return undefined;
  const engine = new EngineClient(data.worker, data);
  const live = document.getElementById('cb-live');
  /** Fields the user left since the page loaded (or the server named): their checks are shown. */
  const touched = new Set<string>();
  /** Fields the user changed: only these show "required". */
  const changed = new Set<string>();
  let announce: string | undefined;
  for (const error of form.querySelectorAll<HTMLElement>('.field-error')) {
    const key = error.closest<HTMLElement>('[data-key]')?.dataset.key;
    if (key !== undefined) {
      touched.add(key);
      changed.add(key);
    }
  }

  const apply = (result: EngineResult): void => {
    const enabled = new Map(result.enabled);
    for (const el of form.querySelectorAll<HTMLElement>('[data-key]')) {
      const off = enabled.get(el.dataset.key ?? '') === false;
      if (el.hidden !== off) el.hidden = off;
    }
    // Hidden fields are still sent (a repeat instance's fields are matched by position); the
    // server's engine leaves the answers of disabled items out, as it decided here.
    for (const [key, text] of result.calculated) {
      const output = form.querySelector<HTMLOutputElement>(
        `[data-key="${CSS.escape(key)}"] output.calculated-value`,
      );
      if (output && output.textContent !== (text || '—')) output.textContent = text || '—';
    }
    const messages = new Map<string, string[]>();
    for (const [key, code, message] of result.problems) {
      if (!touched.has(key) || (code === 'required' && !changed.has(key))) continue;
      messages.set(key, [...(messages.get(key) ?? []), message]);
    }
    for (const key of touched) {
      const wrapper = form.querySelector<HTMLElement>(`[data-key="${CSS.escape(key)}"]`);
      if (!wrapper || wrapper.hidden) continue;
      const shown = messages.get(key) ?? [];
      if (showMessages(wrapper, shown) && key === announce && live)
        live.textContent = shown.length ? `${labelOf(wrapper)}: ${shown.join(' ')}` : '';
    }
    announce = undefined;
    // How many checks fail now: a Submit expected to pass leaves a same-site frame for the EHR's page.
    form.dataset.problems = String(result.problems.length);
    form.dispatchEvent(new Event('cb:checked'));
  };

  // `data-engine` says whether the page shows the engine's answer to its current fields (tests wait for `idle`).
  let scheduled: number | undefined;
  let running = 0;
  const schedule = (): void => {
    form.dataset.engine = 'busy';
    if (scheduled !== undefined) window.clearTimeout(scheduled);
    scheduled = window.setTimeout(() => {
      scheduled = undefined;
      running++;
      void engine.run(fieldsOf(form)).then((result) => {
        running--;
        if (result) apply(result);
        if (running === 0 && scheduled === undefined) form.dataset.engine = 'idle';
      });
    }, 120);
  };
  const keyAt = (target: EventTarget | null): string | undefined =>
    target instanceof Element ? target.closest<HTMLElement>('[data-key]')?.dataset.key : undefined;
  form.addEventListener('input', (event) => {
    const key = keyAt(event.target);
    if (key !== undefined) changed.add(key);
    schedule();
  });
  form.addEventListener('change', (event) => {
    const key = keyAt(event.target);
    if (key !== undefined) changed.add(key);
    schedule();
  });
  form.addEventListener('focusout', (event) => {
    if (!(event.target instanceof Element) || !isControl(event.target)) return;
    const key = keyAt(event.target);
    if (key === undefined) return;
    // Moving between the options of one question is not leaving it.
    const next = event.relatedTarget instanceof Element ? keyAt(event.relatedTarget) : undefined;
    if (next === key) return;
    touched.add(key);
    announce = key;
    schedule();
  });
  return schedule;
};

/** Gives a copy of an instance or row ids of its own, and keeps labels and descriptions pointing at them. */
const freshIds = (root: Element, suffix: string): void => {
  const renamed = new Map<string, string>();
  for (const el of [root, ...root.querySelectorAll('[id]')]) {
    if (!el.id) continue;
    renamed.set(el.id, `${el.id}${suffix}`);
    el.id = `${el.id}${suffix}`;
  }
  for (const label of [root, ...root.querySelectorAll('label[for]')])
    if (label instanceof HTMLLabelElement && renamed.has(label.htmlFor))
      label.htmlFor = renamed.get(label.htmlFor)!;
  for (const ref of [root, ...root.querySelectorAll('[aria-describedby], [aria-labelledby]')])
    for (const name of ['aria-describedby', 'aria-labelledby']) {
      const value = ref.getAttribute(name);
      if (value)
        ref.setAttribute(
          name,
          value
            .split(/\s+/)
            .map((id) => renamed.get(id) ?? id)
            .join(' '),
        );
    }
};

/** Empties a copied instance or row. */
const emptied = (root: Element): void => {
  for (const el of root.querySelectorAll('input, textarea, select')) {
    if (!isControl(el) || (el instanceof HTMLInputElement && el.type === 'hidden')) continue;
    if (el instanceof HTMLInputElement && (el.type === 'radio' || el.type === 'checkbox')) el.checked = false;
    else if (el instanceof HTMLSelectElement)
      el.selectedIndex = el.name.startsWith('u:') ? el.selectedIndex : 0;
    else el.value = '';
  }
  for (const output of root.querySelectorAll('output.calculated-value')) output.textContent = '—';
  for (const error of root.querySelectorAll('.field-error')) error.remove();
  for (const invalid of root.querySelectorAll('[aria-invalid]')) invalid.removeAttribute('aria-invalid');
};

/** The list of instances (groups) or answer rows of a repeating wrapper. */
const listOf = (wrapper: Element): Element | null =>
  [...wrapper.querySelectorAll(':scope > .instances, :scope > .repeats, :scope > * > .repeats')][0] ?? null;

/**
 * Numbers the instances of each repeating group and answer rows ("Nodule 2"), names their Remove
 * buttons after them and shows those only when there is more than one; wrapper ids follow the keys
 * (src/http/app/render.ts itemAnchor), so every id on the page stays unique.
 */
const renumber = (form: HTMLFormElement): void => {
  for (const list of form.querySelectorAll<HTMLElement>('.instances, .repeats')) {
    const rows = [...list.children];
    rows.forEach((row, i) => {
      const remove = row.querySelector<HTMLButtonElement>(
        ':scope > .remove-row, :scope > legend .remove-row, :scope > .instance-head .remove-row',
      );
      if (!remove) return;
      remove.hidden = rows.length < 2;
      remove.textContent = 'Remove';
      remove.setAttribute(
        'aria-label',
        `Remove ${remove.dataset.label ?? ''} ${i + 1}`.replace(/\s+/g, ' ').trim(),
      );
      const number = row.querySelector(':scope > legend .instance-number');
      if (number) number.textContent = rows.length > 1 ? ` ${i + 1}` : '';
    });
  }
  for (const el of form.querySelectorAll<HTMLElement>('[data-key]')) el.id = itemAnchor(el.dataset.key ?? '');
};

/** The editor's repeat instances and rows: Add another, Remove, and the same by key for drafts. */
const repeats = (form: HTMLFormElement, changed: () => void) => {
  let counter = 0;
  const structureChanged = () => {
    refreshKeys(form);
    renumber(form);
    changed();
    form.dispatchEvent(new Event('cb:structure'));
  };
  const add = (wrapper: Element, focus: boolean): boolean => {
    const list = listOf(wrapper);
    const last = list?.lastElementChild;
    if (!list || !last) return false;
    const clone = last.cloneNode(true) as Element;
    emptied(clone);
    // Nested repeats of the copy start with one instance.
    for (const nested of clone.querySelectorAll('.instances, .repeats'))
      while (nested.children.length > 1) nested.lastElementChild?.remove();
    freshIds(clone, `-n${++counter}`);
    if (list.matches('.repeats') && !clone.querySelector('label')) {
      const input = clone.querySelector<HTMLInputElement | HTMLTextAreaElement>('input, textarea');
      if (input) {
        const label = document.createElement('label');
        label.className = 'visually-hidden';
        label.htmlFor = input.id;
        label.textContent = `${wrapper.querySelector('.q-label')?.textContent ?? ''} (${list.children.length + 1})`;
        clone.insertBefore(label, input);
      }
    }
    list.appendChild(clone);
    structureChanged();
    if (focus) clone.querySelector<HTMLElement>('input:not([type=hidden]), textarea, select')?.focus();
    return true;
  };
  const remove = (row: Element, focus: boolean): boolean => {
    const list = row.parentElement;
    if (!list || list.children.length < 2) return false;
    const rows = [...list.children];
    const next = rows[rows.indexOf(row) + 1] ?? rows[rows.indexOf(row) - 1];
    row.remove();
    structureChanged();
    if (focus) {
      const target =
        next?.querySelector<HTMLElement>('input:not([type=hidden]), textarea, select') ??
        list.parentElement?.querySelector<HTMLElement>('button.add-answer, button.add-group');
      target?.focus();
    }
    return true;
  };
  form.addEventListener('click', (event) => {
    const button = (event.target as Element | null)?.closest<HTMLButtonElement>(
      'button[data-add-answer], button[data-add-group], button.remove-row',
    );
    if (!button) return;
    event.preventDefault();
    if (button.matches('.remove-row')) {
      const row = button.closest('.instances > *, .repeats > *');
      if (row) remove(row, true);
      return;
    }
    const wrapper = button.closest('[data-linkid]');
    if (wrapper) add(wrapper, true);
  });
  const wrapperOf = (key: string) => form.querySelector(`[data-key="${CSS.escape(key)}"]`);
  renumber(form);
  return {
    add: (key: string) => {
      const wrapper = wrapperOf(key);
      return wrapper ? add(wrapper, false) : false;
    },
    removeLast: (key: string) => {
      const last = wrapperOf(key) && listOf(wrapperOf(key)!)?.lastElementChild;
      return last ? remove(last, false) : false;
    },
  };
};

/** Starts the editor on the page's report form (no-op on other pages). */
export const start = (): void => {
  const form = document.getElementById('report-form');
  const dataEl = document.getElementById('cb-data');
  if (!(form instanceof HTMLFormElement) || !dataEl) return;
  const data = JSON.parse(dataEl.textContent || '{}') as EditorData;
  const tz = form.querySelector<HTMLInputElement>('input[name="cb:tz"]');
  if (tz) tz.value = utcOffset();
  refreshKeys(form);
  const schedule = liveForm(form, data);
  const rows = repeats(form, () => schedule?.());
  startLongForm(form);
  startReportWork(form, { ...rows, changed: () => schedule?.() });
  schedule?.();
  form.dataset.live = schedule ? 'on' : 'off';
  document.getElementById('error-summary')?.focus();
};

start();
