/**
 * The report editor in the browser (issues 5, 32): the entry point of the editor's bundle
 * (src/http/app/assets.ts). The page works without it; with it, items show and hide as answers
 * change, repeating questions and groups get "Add another", dateTime answers carry the browser's
 * UTC offset, and the error summary takes the focus.
 *
 * Other browser modules of the editor are imported here and started from {@link start}.
 */
import { evaluateEnableWhen, type Rule } from '../enable-when.js';

/** What the server embeds in `#cb-data` (src/http/app/render.ts `editorData`). */
interface EditorData {
  readonly rules: Record<string, Rule>;
  readonly types: Record<string, string>;
  readonly choices: Record<string, Record<string, string | number | boolean>>;
}

/** The `q:`/`n:` controls of the form (inputs, selects, text areas). */
type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

const isControl = (el: Element): el is Control =>
  el instanceof HTMLInputElement || el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement;

const controlsOf = (form: HTMLFormElement): Control[] => [...form.elements].filter(isControl);

/** The browser's UTC offset as `+01:00` (dateTime answers are stored with it). */
const utcOffset = (): string => {
  const minutes = -new Date().getTimezoneOffset();
  const abs = Math.abs(minutes);
  return `${minutes >= 0 ? '+' : '-'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
};

/** Live enableWhen: hides and disables the items whose conditions fail. */
const liveEnableWhen = (form: HTMLFormElement, data: EditorData): (() => void) => {
  const normalise = (linkId: string, raw: string): string | number | boolean | undefined => {
    if (Object.hasOwn(data.choices, linkId)) {
      const choices = data.choices[linkId]!;
      return Object.hasOwn(choices, raw) ? choices[raw] : undefined;
    }
    const type = Object.hasOwn(data.types, linkId) ? data.types[linkId] : undefined;
    if (type === 'boolean') return raw === 'true' ? true : raw === 'false' ? false : undefined;
    if (type === 'integer' || type === 'decimal') {
      const n = Number(raw);
      return Number.isNaN(n) ? undefined : n;
    }
    return raw;
  };
  const collect = (): Record<string, (string | number | boolean)[]> => {
    const values: Record<string, (string | number | boolean)[]> = {};
    for (const el of controlsOf(form)) {
      if (!el.name.startsWith('q:') || el.disabled) continue;
      if (el instanceof HTMLInputElement && (el.type === 'radio' || el.type === 'checkbox') && !el.checked)
        continue;
      const raw = el.value.trim();
      if (!raw) continue;
      const linkId = el.name.slice(2);
      const value = normalise(linkId, raw);
      if (value === undefined) continue;
      if (!Object.hasOwn(values, linkId)) values[linkId] = [];
      values[linkId]!.push(value);
    }
    return values;
  };
  const apply = (): boolean => {
    const enabled = evaluateEnableWhen(data.rules, collect());
    let changed = false;
    for (const wrapper of form.querySelectorAll<HTMLElement>('[data-linkid]')) {
      const linkId = wrapper.dataset.linkid ?? '';
      const on = !Object.hasOwn(enabled, linkId) || enabled[linkId] !== false;
      if (wrapper.hidden === !on) continue;
      wrapper.hidden = !on;
      changed = true;
    }
    for (const el of controlsOf(form)) {
      if (!el.name.startsWith('q:') && !el.name.startsWith('n:')) continue;
      const off = el.closest('[hidden]') !== null;
      if (el.disabled !== off) {
        el.disabled = off;
        changed = true;
      }
    }
    return changed;
  };
  // Hiding an item can change what other items depend on: apply until nothing changes.
  return () => {
    for (let i = 0; i < 10 && apply(); i++);
  };
};

/** "Add another" for repeating questions (`data-add-answer`) and groups (`data-add-group`). */
const addAnother = (form: HTMLFormElement, settle: () => void): void => {
  let counter = 0;
  const fresh = (root: Element): void => {
    for (const el of root.querySelectorAll('input, textarea, select')) {
      if (!isControl(el) || (el instanceof HTMLInputElement && el.type === 'hidden')) continue;
      if (el instanceof HTMLInputElement && (el.type === 'radio' || el.type === 'checkbox'))
        el.checked = false;
      else if (el instanceof HTMLSelectElement) el.selectedIndex = 0;
      else el.value = '';
    }
    for (const el of root.querySelectorAll('[id]')) {
      const old = el.id;
      el.id = `${old}-n${++counter}`;
      const label = root.querySelector<HTMLLabelElement>(`label[for="${CSS.escape(old)}"]`);
      if (label) label.htmlFor = el.id;
      if (el.getAttribute('aria-describedby')) {
        el.removeAttribute('aria-describedby');
        el.removeAttribute('aria-invalid');
      }
    }
    for (const error of root.querySelectorAll('.field-error')) error.remove();
  };
  form.addEventListener('click', (event) => {
    const button = (event.target as Element | null)?.closest<HTMLButtonElement>(
      'button[data-add-answer], button[data-add-group]',
    );
    if (!button) return;
    event.preventDefault();
    const wrapper = button.closest('[data-linkid]');
    const list = wrapper?.querySelector(button.hasAttribute('data-add-answer') ? '.repeats' : '.instances');
    const last = list?.lastElementChild;
    if (!wrapper || !list || !last) return;
    const clone = last.cloneNode(true) as Element;
    fresh(clone);
    if (button.hasAttribute('data-add-answer') && !clone.querySelector('label')) {
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
    settle();
    clone.querySelector<HTMLElement>('input:not([type=hidden]), textarea, select')?.focus();
  });
};

/** Starts the editor on the page's report form (no-op on other pages). */
export const start = (): void => {
  const form = document.getElementById('report-form');
  const dataEl = document.getElementById('cb-data');
  if (!(form instanceof HTMLFormElement) || !dataEl) return;
  const data = JSON.parse(dataEl.textContent || '{}') as EditorData;
  const tz = form.querySelector<HTMLInputElement>('input[name="cb:tz"]');
  if (tz) tz.value = utcOffset();
  const settle = liveEnableWhen(form, data);
  form.addEventListener('input', settle);
  form.addEventListener('change', settle);
  addAnother(form, settle);
  settle();
  document.getElementById('error-summary')?.focus();
};

start();
