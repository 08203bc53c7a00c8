/**
 * Error pages of the application host and the launcher (issues 5, 6, 12): errors are shown to the
 * clinician as a readable page with the right status code, never as JSON. The title says what
 * happened in plain words; the detail is the error's own message as a sentence; the hint says what
 * to do next.
 */
import type { Context } from 'koa';
import { BOUNCE_PARAM } from './launch.js';
import { escapeHtml, layout } from './layout.js';

/**
 * What the 401 pages say about a report being written when the session ended (issue 32): the
 * editor keeps the typed answers in this browser tab (src/http/app/browser/report-work.ts) and
 * offers them back when the report opens again.
 */
export const KEPT_ANSWERS =
  'If you were writing a report, the answers you typed are kept in this browser and will be offered back when you open the report again in this window.';

/** Titles of errors whose code says more than their status. */
export const TITLES_BY_CODE: Record<string, string> = {
  LaunchNotTrusted: 'This launch link cannot be used',
  LauncherNotConfigured: 'The launcher is not available',
  EncounterOfAnotherPatient: 'This launch does not match the patient record',
  ScopeNotGranted: 'Access denied',
  ReadOnly: 'This report is read-only',
  CrossSiteRequest: 'This form cannot be sent from here',
  TaskStarted: 'This report was already started',
  HandoverTokenInvalid: 'This link was already used',
  HandoverTokenExpired: 'This link has expired',
  SessionExpired: 'Your session has expired',
  SessionInvalid: 'Your session has ended',
  SessionRequired: 'Your session is not active',
  PatientErased: "This patient's record was erased",
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
  PatientErased:
    'Nothing of it can be shown or written any more (an erasure by your organisation). Return to your clinical system.',
  DatabaseUnavailable: 'Wait a moment, then reload this page or send the form again.',
  AuditTrailUnavailable: 'Wait a moment, then reload this page or send the form again.',
  HandoverTokenInvalid:
    'A link that opens casebook works once, for 5 minutes. Go back to your clinical system and open the report from there again: it creates a new link. Reloading this page or using Back does not.',
  HandoverTokenExpired:
    'A link that opens casebook works once, for 5 minutes. Go back to your clinical system and open the report from there again: it creates a new link.',
  SessionExpired: 'Go back to your clinical system and open the report from there again.',
  SessionInvalid: `Go back to your clinical system and open the report from there again. ${KEPT_ANSWERS}`,
  SessionRequired: `Go back to your clinical system and open the report from there again. ${KEPT_ANSWERS}`,
};

/** This GET's URL without the launch's one-time bounce marker (src/http/app/launch.ts). */
const openUrlOf = (ctx: Context): string => {
  const params = new URLSearchParams(ctx.querystring);
  params.delete(BOUNCE_PARAM);
  const query = params.toString();
  // Relative to this page: the same origin whatever the Host header said.
  return `${ctx.path}${query ? `?${query}` : ''}`;
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

/**
 * What a page shown in a frame without its session says (issue 32; docs/interface.md §5 rule 5,
 * docs/architecture.md "Embedding"): the session cookie is SameSite=Strict, so a browser neither
 * keeps nor sends it in a frame whose page is on another site. Embedding works from a page of the
 * same site or in a top-level web view; a new window always works.
 * @param openUrl the URL to open at the top level (this request's, for a GET).
 */
export const frameNote = (openUrl: string | undefined): string =>
  `<div class="frame-note" role="note"><h2>This page cannot work inside this frame</h2><p>casebook keeps your session in a cookie that browsers send only to pages of the same site. Inside a page of another site, such as your clinical system's, the browser leaves it out, so casebook cannot see that you are signed in. Embedding works when the clinical system's page is on the same site as casebook, or in a top-level web view.</p>${
    openUrl
      ? `<p><a class="button-link" href="${escapeHtml(openUrl)}" target="_blank" rel="noopener">Open in a new window</a></p>`
      : ''
  }</div>`;

/** The request came to a frame (`Sec-Fetch-Dest: iframe` or `frame`). */
export const inFrame = (ctx: Context): boolean => {
  // Read the header off the request itself: a context without Koa's getters (a test's) is not in a frame.
  const dest = ctx.request?.headers?.['sec-fetch-dest'] ?? ctx.headers?.['sec-fetch-dest'];
  return /^(?:i?frame)$/.test(typeof dest === 'string' ? dest : '');
};

/**
 * Writes an HTML error page with `status`; `detail` is shown escaped; `code` picks a better title.
 * A 401 in a frame explains the SameSite=Strict cookie and offers a new window ({@link frameNote}).
 */
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
<p class="hint">${escapeHtml(hint)} (Status ${status}.)</p>${
      status === 401 && inFrame(ctx) ? frameNote(ctx.method === 'GET' ? openUrlOf(ctx) : undefined) : ''
    }</div></main>`,
  });
};

/**
 * The page a handover link answers in a frame of another site (issue 32): the SameSite=Strict
 * session cookie would not be kept there, so the single-use token is left unused and the page
 * offers the same link in a new window ({@link frameNote}), where it works.
 * @param openUrl the handover link (relative to the auth host).
 */
export const sendFramePage = (ctx: Context, openUrl: string): void => {
  const title = 'Open the report in a new window';
  ctx.status = 200;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Cache-Control', 'no-store');
  ctx.set('Referrer-Policy', 'no-referrer');
  ctx.body = layout({
    title,
    chrome: 'embedded',
    body: `<main id="main"><div class="card"><h1>${escapeHtml(title)}</h1>${frameNote(openUrl)}</div></main>`,
  });
};
