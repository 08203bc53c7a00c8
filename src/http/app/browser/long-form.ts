/**
 * Long forms in the report editor (issue 32 "Long forms and the edges"):
 *
 * - the section list (`nav.sections`, one link per top-level group, rendered by
 *   src/http/app/editor.ts) is open beside the form on wide screens and a menu on phones, and
 *   shows each section's count of field messages as the engine's checks change;
 * - a link of the error summary or the section list moves the focus to its field (not only the
 *   scroll position), so the next Tab continues from there;
 * - a focused field is never covered by the sticky patient banner or action bar (WCAG 2.2
 *   2.4.11 Focus Not Obscured): the page's `scroll-padding` handles most moves, and this module
 *   scrolls the rest into the clear.
 */

/** Screens at least this wide (CSS pixels) show the section list as an open sidebar. */
export const SIDEBAR_MIN_WIDTH = 1100;

const FOCUSABLE =
  'input:not([type=hidden]):not([disabled]), select:not([disabled]), textarea:not([disabled])';

/** The first field of the wrapper with DOM id `id` that can take the focus (shown), or undefined. */
const fieldIn = (id: string): HTMLElement | undefined => {
  const target = document.getElementById(id);
  if (!target) return undefined;
  const controls = [...target.querySelectorAll<HTMLElement>(FOCUSABLE)].filter(
    (el) => el.getClientRects().length > 0,
  );
  return (
    controls.find((el) => el instanceof HTMLInputElement && el.type === 'radio' && el.checked) ?? controls[0]
  );
};

/** Moves the focus to the field a `#item-…` link names (else to its wrapper). */
const followLink = (link: HTMLAnchorElement, event: Event): void => {
  const id = decodeURIComponent(link.hash.slice(1));
  if (!id) return;
  const field = fieldIn(id);
  const target = field ?? document.getElementById(id);
  if (!target) return;
  event.preventDefault();
  if (!field) target.tabIndex = -1;
  target.focus({ preventScroll: true });
  target.scrollIntoView({ block: 'center' });
  history.replaceState(null, '', `#${id}`);
};

/** Scrolls `el` out from under the sticky banner (top) and action bar (bottom). */
const keepClear = (el: Element): void => {
  const rect = el.getBoundingClientRect();
  const banner = document.querySelector('.patient-banner')?.getBoundingClientRect();
  const bar = document.querySelector('#report-form .actions')?.getBoundingClientRect();
  const top = banner && banner.bottom > 0 ? banner.bottom : 0;
  const bottom = bar && bar.top < window.innerHeight ? bar.top : window.innerHeight;
  const margin = 12;
  if (rect.bottom > bottom - margin) window.scrollBy(0, rect.bottom - bottom + margin);
  else if (rect.top < top + margin) window.scrollBy(0, rect.top - top - margin);
};

/** Writes each section's count of field messages into its link. */
const countErrors = (form: HTMLFormElement, nav: HTMLElement): void => {
  let total = 0;
  for (const link of nav.querySelectorAll<HTMLAnchorElement>('a[data-section]')) {
    const section = document.getElementById(link.dataset.section ?? '');
    const count = section
      ? [...section.querySelectorAll('.field-error')].filter((e) => !e.closest('[hidden]')).length
      : 0;
    total += count;
    const badge = link.querySelector<HTMLElement>('.section-errors');
    if (!badge) continue;
    const text = count === 0 ? '' : `${count} ${count === 1 ? 'error' : 'errors'}`;
    if (badge.textContent !== text) badge.textContent = text;
    badge.hidden = count === 0;
  }
  const summary = nav.querySelector<HTMLElement>('.sections-total');
  if (summary) {
    summary.textContent = total === 0 ? '' : `(${total} ${total === 1 ? 'error' : 'errors'})`;
    summary.hidden = total === 0;
  }
  form.dataset.sectionErrors = String(total);
};

/** Starts the section list, focus-moving links and the focus guard on the report form. */
export const startLongForm = (form: HTMLFormElement): void => {
  const nav = document.querySelector<HTMLElement>('nav.sections');
  const menu = nav?.querySelector<HTMLDetailsElement>('details');
  if (nav && menu) {
    const wide = window.matchMedia(`(min-width: ${SIDEBAR_MIN_WIDTH}px)`);
    const place = () => {
      menu.open = wide.matches;
    };
    place();
    wide.addEventListener('change', place);
    nav.addEventListener('click', (event) => {
      const link = (event.target as Element | null)?.closest<HTMLAnchorElement>('a[href^="#"]');
      if (!link) return;
      followLink(link, event);
      // On a phone the menu closes once a section is chosen.
      if (!wide.matches) menu.open = false;
    });
    countErrors(form, nav);
    form.addEventListener('cb:checked', () => countErrors(form, nav));
    form.addEventListener('cb:structure', () => countErrors(form, nav));
  }
  document.getElementById('error-summary')?.addEventListener('click', (event) => {
    const link = (event.target as Element | null)?.closest<HTMLAnchorElement>('a[href^="#"]');
    if (link) followLink(link, event);
  });
  document.addEventListener('focusin', (event) => {
    if (event.target instanceof Element && event.target.closest('#report-form .card'))
      keepClear(event.target.closest('.with-unit, label.option') ?? event.target);
  });
};
