/**
 * Error pages of the application host and the launcher (issues 5, 6, 12): errors are shown to the
 * clinician as a readable page with the right status code, never as JSON. The title says what
 * happened in plain words; the detail is the error's own message as a sentence; the hint says what
 * to do next.
 */
import type { Context } from 'koa';
import { escapeHtml, layout } from './layout.js';

/** Titles of errors whose code says more than their status. */
export const TITLES_BY_CODE: Record<string, string> = {
  LaunchNotTrusted: 'This launch link cannot be used',
  LauncherNotConfigured: 'The launcher is not available',
  EncounterOfAnotherPatient: 'This launch does not match the patient record',
  ScopeNotGranted: 'Access denied',
  ReadOnly: 'This report is read-only',
  CrossSiteRequest: 'This form cannot be sent from here',
  TaskStarted: 'This report was already started',
};

/** Titles by status, for the other errors ({@link FALLBACK_TITLE} for a status not listed). */
export const TITLES: Record<number, string> = {
  400: 'This link is not valid',
  401: 'Your session is not active',
  403: 'Access denied',
  404: 'Not found',
  405: 'This action is not available here',
  409: 'This link is ambiguous',
  410: 'This was deleted',
  412: 'This was changed in the meantime',
  413: 'This request is too large',
  415: 'Unsupported request',
  422: 'This cannot be opened',
  500: 'Something went wrong',
  502: 'The clinical system did not answer as expected',
  503: 'This service is not available right now',
};

/** What to do next, by error code ({@link DEFAULT_HINT} for the others). */
export const HINTS: Record<string, string> = {
  LaunchNotTrusted: 'Open the report again from your clinical system; it creates a new link.',
  LauncherNotConfigured: 'Please tell IT support: the launcher needs its configuration.',
  EncounterOfAnotherPatient:
    "Please tell IT support: the clinical system's patient and encounter numbers disagree with casebook's record.",
  DatabaseUnavailable: 'Wait a moment, then reload this page or send the form again.',
  AuditTrailUnavailable: 'Wait a moment, then reload this page or send the form again.',
};

export const FALLBACK_TITLE = 'Something went wrong';
export const DEFAULT_HINT = 'Return to your clinical system and open the report again.';

/** A message as a sentence: a capital first letter and a final full stop. */
export const sentence = (message: string): string => {
  const text = message.trim();
  if (!text) return text;
  const first = text[0]!.toUpperCase() + text.slice(1);
  return /[.!?]$/.test(first) ? first : `${first}.`;
};

/** Writes an HTML error page with `status`; `detail` is shown escaped; `code` picks a better title. */
export const sendErrorPage = (ctx: Context, status: number, detail: string, code?: string): void => {
  const title = (code && TITLES_BY_CODE[code]) ?? TITLES[status] ?? FALLBACK_TITLE;
  const hint = (code && HINTS[code]) ?? DEFAULT_HINT;
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Cache-Control', 'no-store');
  ctx.body = layout({
    title,
    chrome: 'standalone',
    body: `<main id="main" class="error"><div class="card"><h1>${escapeHtml(title)}</h1><p class="detail">${escapeHtml(sentence(detail))}</p>
<p class="hint">${escapeHtml(hint)} (Status ${status}.)</p></div></main>`,
  });
};
