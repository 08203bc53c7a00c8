/**
 * The launch entry point `GET {app_url}/external/v1` (docs/interface.md §4.2, §3.2, §7 launch rows; docs/architecture.md "Security").
 */
import { parseCookie } from 'cookie';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { DomainError } from '../../domain/decider.js';
import { idInReference, resourceIdIn } from '../../fhir/references.js';
import { tokenOf } from '../../fhir/resources.js';
import { findVisible, type ResourceRow, readVisible } from '../../queries/visibility.js';
import { SESSION_COOKIE } from '../auth/sessions.js';
import { HttpError } from '../errors.js';
import { openTask, type PageContext, pageContext, sendHtml, withQuery } from './context.js';
import { escapeHtml } from './layout.js';

/** Query marker of the one same-site re-request. */
export const BOUNCE_PARAM = 'cb_bounce';

const one = (value: string | string[] | undefined, name: string): string | undefined => {
  if (Array.isArray(value)) {
    if (value.length > 1) throw new DomainError('invalid', 'InvalidLaunch', `give ${name} only once`, name);
    return value[0];
  }
  return value;
};

/**
 * The SameSite=Strict cookie is not sent on the first request of a cross-site redirect chain
 * (docs/architecture.md "Security"): answer a page that requests the same URL again from our own origin, once.
 */
const bouncePage = (url: string): string => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta http-equiv="refresh" content="0;url=${escapeHtml(url)}"><title>Opening… · casebook</title>
<style>body{font:15px system-ui,sans-serif;color:#1d2733;margin:3rem;text-align:center}</style></head>
<body><p>Opening the report…</p><p><a href="${escapeHtml(url)}">Continue</a></p>
<script>location.replace(${JSON.stringify(url).replace(/</g, '\\u003c')});</script></body></html>`;

/**
 * Finds the Task the launch names, as the session may see it: by id (403 when the session may not
 * read it), or by identifier among the Tasks the session may read (one it may not read is not
 * found, as an unknown identifier).
 * @throws {DomainError} 400 / 403 / 404 / 409.
 */
const findTask = async (ctx: Context, page: PageContext): Promise<ResourceRow> => {
  const query = ctx.query as Record<string, string | string[] | undefined>;
  const task = one(query.task, 'task');
  const identifier = one(query['task:identifier'], 'task:identifier');
  if (task === undefined && identifier === undefined)
    throw new DomainError(
      'invalid',
      'TaskRequired',
      'the launch link names no task: it needs task=Task/<id> or task:identifier=<system>|<value>',
      'task',
    );
  if (task !== undefined) {
    const id = resourceIdIn(task.trim()) ?? idInReference(task.trim(), 'Task');
    if (id === undefined)
      throw new DomainError(
        'invalid',
        'InvalidTask',
        `task must be a reference such as Task/123, not ${task}`,
        'task',
      );
    const row = await readVisible(page.command.sql, page.principal, 'Task', id);
    if (!row || row.deleted)
      throw new DomainError('not_found', 'TaskNotFound', `Task/${id} is not known in this data tenant`);
    return row;
  }
  const token = tokenOf(identifier!);
  if (token.system === undefined || token.value === '')
    throw new DomainError(
      'invalid',
      'InvalidTaskIdentifier',
      'task:identifier must be <system>|<value> (URL-encoded, the bar as %7C)',
      'task:identifier',
    );
  const rows = await findVisible(page.command.sql, page.principal, 'Task', {
    identifiers: [token],
    limit: 2,
  });
  if (rows.length === 0)
    throw new DomainError('not_found', 'TaskNotFound', 'no Task with this identifier in this data tenant');
  if (rows.length > 1)
    throw new DomainError(
      'conflict',
      'MultipleTasks',
      'more than one Task has this identifier; the link is ambiguous',
    );
  return rows[0]!;
};

/** GET {app_url}/external/v1 (docs/interface.md §4.2). */
export const launch = async (ctx: Context, casebook: Casebook): Promise<void> => {
  const appUrl = casebook.config.appUrl.replace(/\/+$/, '');
  if (!parseCookie(ctx.get('Cookie'))[SESSION_COOKIE]) {
    if (ctx.query[BOUNCE_PARAM] !== undefined)
      throw new HttpError(
        401,
        'SessionRequired',
        'no session cookie arrived: open the report again from your clinical system (cookies must be enabled)',
      );
    const params = new URLSearchParams(ctx.querystring);
    params.set(BOUNCE_PARAM, '1');
    // Same path as requested, relative to our own origin: the bounce is same-site by construction.
    sendHtml(ctx, 200, bouncePage(`${ctx.path}?${params.toString()}`));
    ctx.set('Referrer-Policy', 'same-origin');
    return;
  }
  const page = await pageContext(ctx, casebook);
  // Opening checks the Task, its Patient, Encounter and report: a Task the editor could not show
  // is refused here, not after a redirect.
  const { task, response } = await openTask(page, await findTask(ctx, page));
  page.note([{ reference: `Task/${task.id}`, patientId: task.patientId }]);
  const status = task.resource.status;
  const base = `${appUrl}/tasks/${task.id}`;
  ctx.status = 303;
  ctx.set('Cache-Control', 'no-store');
  ctx.set('Referrer-Policy', 'same-origin');
  if (status === 'failed')
    throw new DomainError('unprocessable', 'TaskFailed', `Task/${task.id} has failed and cannot be opened`);
  if (status === 'draft') {
    // docs/interface.md §4.2: readonly applies only when the task opens in the report editor.
    const carry = new URLSearchParams(page.carry);
    carry.delete('readonly');
    ctx.redirect(withQuery(`${base}/forms`, carry));
    return;
  }
  if (!response)
    throw new DomainError(
      'unprocessable',
      'NoResponse',
      `Task/${task.id} is ${String(status)} but has no questionnaire response yet`,
    );
  ctx.redirect(withQuery(`${base}/report`, page.carry));
  ctx.status = 303;
};
