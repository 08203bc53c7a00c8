/**
 * Parts of the report pages about versions (issue 32; docs/interface.md §1.3): the read-only view's
 * status line (final / amended / entered in error, version, author, time), the conflict panel of a
 * stale save (what changed elsewhere, theirs vs. yours, and the merge button), the notice after a
 * merge, and dates and times written for people.
 */
import type { MergeAnswer, MergeChange } from '../../domain/report/merge.js';
import type { ResourceRow } from '../../queries/visibility.js';
import { readIfVisible } from '../../queries/visibility.js';
import type { FormDefinition } from '../../sdc/engine/index.js';
import type { QuestionnaireResponseAnswer } from '../../sdc/types.js';
import type { PageContext } from './context.js';
import { type Choice, shownAnswer } from './form-data.js';
import { escapeHtml } from './layout.js';

const DATE = new Intl.DateTimeFormat('en-GB', {
  day: 'numeric',
  month: 'short',
  year: 'numeric',
  timeZone: 'UTC',
});
const DATE_TIME = new Intl.DateTimeFormat('en-GB', {
  day: 'numeric',
  month: 'short',
  year: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  timeZone: 'UTC',
});

/**
 * A FHIR date or dateTime for people: `27 Nov 2026`, `27 Nov 2026, 10:42 UTC`; partial dates
 * (`2026`, `2026-11`) and anything unparsable are returned as given.
 */
export const humanDateTime = (value: string): string => {
  if (/^\d{4}-\d{2}-\d{2}$/.test(value)) {
    const d = new Date(`${value}T00:00:00Z`);
    return Number.isNaN(d.getTime()) ? value : DATE.format(d);
  }
  if (!/^\d{4}-\d{2}-\d{2}T/.test(value)) return value;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? value : `${DATE_TIME.format(d)} UTC`;
};

/** Who wrote the version: the Practitioner's name when the session may read it, else its reference. */
const authorName = async (page: PageContext, reference: string | undefined): Promise<string | undefined> => {
  const id = reference?.match(/^Practitioner\/(\d+)$/)?.[1];
  if (!id) return reference;
  try {
    const row = await readIfVisible(page.command.sql, page.principal, 'Practitioner', Number(id));
    const name = (
      row?.resource.name as { text?: string; family?: string; given?: string[] }[] | undefined
    )?.[0];
    const text = name?.text ?? [...(name?.given ?? []), name?.family].filter(Boolean).join(' ');
    return text || reference;
  } catch {
    return reference;
  }
};

/**
 * The read-only view's status line: "Final report · version 3 · Dr A · 27 Nov 2026, 10:42 UTC", and
 * for an amended or entered-in-error report the reason given (from the response's history events).
 */
export const reportStatusLine = async (
  page: PageContext,
  response: ResourceRow,
  label: string,
): Promise<string> => {
  const status = String(response.resource.status ?? '');
  const events = await page.command.store.readStream(`QuestionnaireResponse-${response.id}`, {
    fromRevision: BigInt(Math.max(0, response.versionId - 1)),
    maxCount: 1,
  });
  const data = events[0]?.data as { reason?: string; author?: string } | undefined;
  const authorRef =
    data?.author ??
    (typeof (response.resource.author as { reference?: unknown } | undefined)?.reference === 'string'
      ? String((response.resource.author as { reference: string }).reference)
      : undefined);
  const author = await authorName(page, authorRef);
  const when = humanDateTime(response.lastUpdated.toISOString());
  const what =
    status === 'completed'
      ? 'Final report'
      : status === 'amended'
        ? 'Amended report'
        : status === 'entered-in-error'
          ? 'Entered in error'
          : label;
  const parts = [`<strong>${escapeHtml(what)}</strong>`, `version ${response.versionId}`];
  if (author) parts.push(escapeHtml(author));
  parts.push(`<time datetime="${escapeHtml(response.lastUpdated.toISOString())}">${escapeHtml(when)}</time>`);
  const reason =
    data?.reason && (status === 'amended' || status === 'entered-in-error')
      ? `<p class="reason">Reason: ${escapeHtml(data.reason)}</p>`
      : '';
  return `<div class="status-line status-${escapeHtml(status)}" role="note"><p>${parts.join(' · ')}</p>${reason}</div>`;
};

const answersText = (
  form: FormDefinition,
  choices: ReadonlyMap<string, readonly Choice[]>,
  linkId: string,
  answers: readonly MergeAnswer[],
): string => {
  const item = form.byLinkId.get(linkId)?.item;
  if (answers.length === 0) return '<span class="empty">(no answer)</span>';
  return answers
    .map((a) => {
      const answer = a as unknown as QuestionnaireResponseAnswer;
      const text = item ? shownAnswer(item, answer, choices.get(linkId)) : JSON.stringify(a);
      const raw = answer.valueDateTime ?? answer.valueDate;
      return escapeHtml(typeof raw === 'string' && text === raw ? humanDateTime(raw) : text);
    })
    .join(', ');
};

const itemName = (form: FormDefinition, linkId: string): string =>
  escapeHtml(String(form.byLinkId.get(linkId)?.item.text ?? linkId));

const OUTCOMES: Record<MergeChange['outcome'], string> = {
  applied: 'Only you changed it: yours can be applied',
  collision: 'Changed by both: theirs is kept unless you change it again',
  theirs: 'Changed elsewhere',
};

/**
 * The conflict panel of a refused stale save (409): the report changed elsewhere since the page was
 * opened; per item, theirs vs. yours (`mine`: the user's answers are on the page) and what a merge
 * does; with `mergeable`, the button that applies the user's non-colliding changes (action=merge,
 * inside the editor form so every answer is posted again).
 */
export const conflictPanel = (
  form: FormDefinition,
  choices: ReadonlyMap<string, readonly Choice[]>,
  changes: readonly MergeChange[],
  options: { baseVersion: number; currentVersion: number; mine: boolean; mergeable: boolean },
): string => {
  const rows = changes
    .map(
      (c) =>
        `<tr><th scope="row">${itemName(form, c.linkId)}</th><td>${answersText(form, choices, c.linkId, c.theirs)}</td>${
          options.mine
            ? `<td>${answersText(form, choices, c.linkId, c.mine)}</td><td>${OUTCOMES[c.outcome]}</td>`
            : ''
        }</tr>`,
    )
    .join('');
  const table =
    changes.length > 0
      ? `<table class="changes"><caption>What changed</caption><thead><tr><th scope="col">Question</th><th scope="col">Now stored (version ${options.currentVersion})</th>${
          options.mine ? '<th scope="col">Yours (not saved)</th><th scope="col">If applied</th>' : ''
        }</tr></thead><tbody>${rows}</tbody></table>`
      : '<p>No answer differs; only other details of the report changed.</p>';
  const collisions = changes.filter((c) => c.outcome === 'collision').length;
  const button = options.mergeable
    ? `<p><button type="submit" form="report-form" name="action" value="merge" class="primary">Apply my changes to the newer version</button></p>
<p class="hint">Your changes are put onto version ${options.currentVersion} for you to review; nothing is stored until you save.${
        collisions > 0
          ? ` ${collisions} question${collisions === 1 ? ' was' : 's were'} changed by both: the stored answer is kept there.`
          : ''
      }</p>`
    : '';
  return `<section id="conflict" class="conflict card" role="alert" aria-labelledby="conflict-title" tabindex="-1">
<h2 id="conflict-title">This report was changed elsewhere since you opened it</h2>
<p>You opened version ${options.baseVersion}; version ${options.currentVersion} is now stored. ${
    options.mine
      ? 'Nothing of yours was saved: your answers are still on this page.'
      : 'The answers below are the stored ones.'
  }</p>${table}${button}</section>`;
};

/** The notice after a merge: what was applied, what collided (kept as stored), and that nothing is saved yet. */
export const mergedNotice = (
  form: FormDefinition,
  choices: ReadonlyMap<string, readonly Choice[]>,
  changes: readonly MergeChange[],
  currentVersion: number,
): string => {
  const applied = changes.filter((c) => c.outcome === 'applied');
  const collided = changes.filter((c) => c.outcome === 'collision');
  const list = (title: string, items: readonly MergeChange[], showMine: boolean) =>
    items.length === 0
      ? ''
      : `<h3>${title}</h3><ul>${items
          .map(
            (c) =>
              `<li>${itemName(form, c.linkId)}: ${answersText(form, choices, c.linkId, showMine ? c.mine : c.theirs)}${
                showMine ? '' : ` (yours was: ${answersText(form, choices, c.linkId, c.mine)})`
              }</li>`,
          )
          .join('')}</ul>`;
  return `<section class="notice merged" role="status" aria-labelledby="merged-title"><h2 id="merged-title">Your changes were applied to version ${currentVersion}</h2>
<p>Review the report, then save: nothing is stored yet.</p>${list('Applied', applied, true)}${list(
    'Changed by both: the stored answer is kept',
    collided,
    false,
  )}</section>`;
};
