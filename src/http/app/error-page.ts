/**
 * Error pages of the application host (issue 5): launch and editor errors are shown to the
 * clinician as a readable page with the right status code, never as JSON.
 */
import type { Context } from 'koa';
import { escapeHtml, layout } from './layout.js';

const TITLES: Record<number, string> = {
  400: 'This link is not valid',
  401: 'Your session is not active',
  403: 'You may not open this',
  404: 'Not found',
  409: 'This link is ambiguous',
  410: 'This was deleted',
  413: 'This request is too large',
  415: 'Unsupported request',
  422: 'This cannot be opened',
  500: 'Something went wrong',
};

/** Writes an HTML error page with `status`; `detail` is shown escaped. */
export const sendErrorPage = (ctx: Context, status: number, detail: string): void => {
  const title = TITLES[status] ?? 'Something went wrong';
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Cache-Control', 'no-store');
  ctx.body = layout({
    title,
    chrome: 'standalone',
    body: `<main id="main" class="error"><div class="card"><h1>${escapeHtml(title)}</h1><p class="detail">${escapeHtml(detail)}</p>
<p class="hint">Status ${status}. Return to your clinical system and open the report again.</p></div></main>`,
  });
};
