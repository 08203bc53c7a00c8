/**
 * What every application-host page needs (issue 5): the session behind the `auth_session`
 * cookie, its principal (scopes as on the data server), a command context acting as the session,
 * the chrome (deployment_mode, overridden by `viewMode`) and the Task being worked on.
 */

import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import type { CommandContext } from '../../commands/context.js';
import { DomainError } from '../../domain/decider.js';
import { type Principal, targetOf } from '../../fhir/access.js';
import type { AuditEntity } from '../../fhir/audit-event.js';
import { taskLinks } from '../../fhir/definitions.js';
import { referenceId as fhirReferenceId, resourceIdIn } from '../../fhir/references.js';
import type { SessionRow } from '../../queries/sessions.js';
import { type ResourceRow, readVisible, visibleTo } from '../../queries/visibility.js';
import { noteAudit } from '../audit.js';
import { sessionFromCookie } from '../auth/sessions.js';
import { sessionPrincipal } from '../fhir/principal.js';
import { escapeHtml } from './layout.js';

export interface PageContext {
  readonly session: SessionRow;
  readonly principal: Principal;
  readonly command: CommandContext;
  readonly chrome: 'embedded' | 'standalone';
  /** `readonly=yes` given (only that literal, docs/interface.md §4.2). */
  readonly readonly: boolean;
  /** The query to carry along internal links: readonly and viewMode as given. */
  readonly carry: URLSearchParams;
  /** Tells the audit trail which resources this page showed or changed. */
  readonly note: (entities: readonly AuditEntity[]) => void;
}

const first = (value: string | string[] | undefined): string | undefined =>
  Array.isArray(value) ? value[0] : value;

/** `viewMode` and `readonly` of the query (or of the posted form), to carry along. */
export const carriedParams = (source: Record<string, string | string[] | undefined>): URLSearchParams => {
  const carry = new URLSearchParams();
  const viewMode = first(source.viewMode);
  if (viewMode === 'embedded' || viewMode === 'standalone') carry.set('viewMode', viewMode);
  if (first(source.readonly) === 'yes') carry.set('readonly', 'yes');
  return carry;
};

/**
 * The page context of a request.
 * @throws {HttpError} 401 without an active session cookie.
 */
export const pageContext = async (ctx: Context, casebook: Casebook): Promise<PageContext> => {
  const session = await sessionFromCookie(ctx, casebook);
  const principal = await sessionPrincipal(casebook, session);
  const body = (ctx.method === 'POST' ? ctx.request.body : undefined) as
    | Record<string, string | string[] | undefined>
    | undefined;
  const carry = carriedParams({
    ...(body ?? {}),
    ...(ctx.query as Record<string, string | string[] | undefined>),
  });
  const viewMode = carry.get('viewMode') as 'embedded' | 'standalone' | null;
  return {
    session,
    principal,
    command: casebook.context({
      tenantId: session.tenantId,
      actor: principal.actor,
      requestId: ctx.state.requestId as string,
    }),
    chrome: viewMode ?? session.deploymentMode,
    readonly: carry.get('readonly') === 'yes',
    carry,
    note: (entities) => noteAudit(ctx, { entities }),
  };
};

/** `path?carry` (plus extra parameters). */
export const withQuery = (
  path: string,
  params: URLSearchParams,
  extra: Record<string, string> = {},
): string => {
  const all = new URLSearchParams(params);
  for (const [k, v] of Object.entries(extra)) all.set(k, v);
  const query = all.toString();
  return query ? `${path}?${query}` : path;
};

/** Hidden inputs carrying `viewMode`/`readonly` through a POST. */
export const carriedInputs = (carry: URLSearchParams): string =>
  [...carry.entries()]
    .map(([k, v]) => `<input type="hidden" name="${escapeHtml(k)}" value="${escapeHtml(v)}">`)
    .join('');

/** A reference's id of `type`, relative or absolute (`…/Patient/12` → 12), or undefined. */
export const referenceId = (reference: unknown, type: string): number | undefined =>
  fhirReferenceId(reference, type, { absolute: true });

/** A Task the session opened, with the live resources it shows (each read once). */
export interface OpenedTask {
  readonly task: ResourceRow;
  readonly patient: ResourceRow | undefined;
  readonly encounter: ResourceRow | undefined;
  /** Its QuestionnaireResponse (`focus`, else an output), the report the editor opens. */
  readonly response: ResourceRow | undefined;
}

/**
 * Opens a Task for the session (docs/interface.md §3.2): the Task and everything a page of it
 * shows — its Patient, its Encounter and its report — must each be readable by the session
 * (src/queries/visibility.ts; issue 33: a Task of this session's patient pointing at another
 * patient's report opens nothing). They are read here, once, for the page.
 * @throws {DomainError} 403 when the session may not read the Task or one of them.
 */
export const openTask = async (page: PageContext, task: ResourceRow): Promise<OpenedTask> => {
  if (!visibleTo(page.principal, targetOf(task)))
    throw new DomainError(
      'forbidden',
      'ScopeNotGranted',
      `this session's scopes do not allow reading Task/${task.id}`,
    );
  const { patientId, encounterId, responseId } = taskLinks(task.resource);
  const read = (type: 'Patient' | 'Encounter' | 'QuestionnaireResponse', id: number | undefined) =>
    id === undefined ? undefined : readVisible(page.command.sql, page.principal, type, id);
  const live = (row: ResourceRow | undefined) => (row && !row.deleted ? row : undefined);
  const [patient, encounter, response] = await Promise.all([
    read('Patient', patientId),
    read('Encounter', encounterId),
    read('QuestionnaireResponse', responseId),
  ]);
  return { task, patient: live(patient), encounter: live(encounter), response: live(response) };
};

/** The Task `id` of the tenant, opened for the session ({@link openTask}). @throws {DomainError} 404 / 403. */
export const loadTask = async (page: PageContext, rawId: string | undefined): Promise<OpenedTask> => {
  const id = rawId === undefined ? undefined : resourceIdIn(rawId);
  const row = id === undefined ? undefined : await readVisible(page.command.sql, page.principal, 'Task', id);
  if (!row || row.deleted)
    throw new DomainError(
      'not_found',
      'TaskNotFound',
      `Task/${rawId ?? ''} is not known in this data tenant`,
    );
  const opened = await openTask(page, row);
  page.note([{ reference: `Task/${row.id}`, patientId: row.patientId }]);
  return opened;
};

/** The top bar's context: patient name and birth date. */
export const patientBanner = (patient: Record<string, unknown> | undefined): string => {
  if (!patient) return '';
  const name = (Array.isArray(patient.name) ? patient.name[0] : undefined) as
    | { text?: string; family?: string; given?: string[] }
    | undefined;
  const display =
    name?.text ??
    [name?.family ? name.family.toUpperCase() : undefined, (name?.given ?? []).join(' ')]
      .filter(Boolean)
      .join(', ');
  const parts = [
    display ? `<span class="patient-name">${escapeHtml(display)}</span>` : '',
    typeof patient.birthDate === 'string'
      ? `<span class="patient-dob">born ${escapeHtml(patient.birthDate)}</span>`
      : '',
    typeof patient.gender === 'string'
      ? `<span class="patient-sex">${escapeHtml(patient.gender)}</span>`
      : '',
  ].filter(Boolean);
  return parts.join('<span class="sep" aria-hidden="true">·</span>');
};

/** Sends an HTML page. */
export const sendHtml = (ctx: Context, status: number, html: string): void => {
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Cache-Control', 'no-store');
  ctx.body = html;
};
