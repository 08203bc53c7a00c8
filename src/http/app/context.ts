/**
 * What every application-host page needs (issue 5): the session behind the `auth_session`
 * cookie, its principal (scopes as on the data server), a command context acting as the session,
 * the chrome (deployment_mode, overridden by `viewMode`) and the Task being worked on.
 */

import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import type { CommandContext } from '../../commands/context.js';
import { readTenant } from '../../commands/sessions.js';
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

/** What the patient banner shows of the report open on the page. */
export interface BannerReport {
  /** QuestionnaireResponse.status (`in-progress`, `completed`, `amended`, …). */
  readonly status: string;
  /** Its meta.versionId, when known. */
  readonly version?: string;
}

const REPORT_STATUS: Record<string, string> = {
  'in-progress': 'In progress',
  completed: 'Final',
  amended: 'Amended',
  'entered-in-error': 'Entered in error',
  stopped: 'Stopped',
};

/** Whole years from `birthDate` (YYYY, YYYY-MM or YYYY-MM-DD) to `now` (UTC), or undefined. */
export const ageOn = (birthDate: string, now: Date): number | undefined => {
  const match = /^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?/.exec(birthDate);
  if (!match) return undefined;
  const [year, month, day] = [Number(match[1]), Number(match[2] ?? 1), Number(match[3] ?? 1)];
  let age = now.getUTCFullYear() - year;
  const beforeBirthday =
    now.getUTCMonth() + 1 < month || (now.getUTCMonth() + 1 === month && now.getUTCDate() < day);
  if (beforeBirthday) age--;
  return age >= 0 && age < 200 ? age : undefined;
};

/** The MRN: the Patient's identifier of `mrnSystem` (the tenant's setting), else its first identifier. */
export const mrnOf = (
  patient: Record<string, unknown>,
  mrnSystem: string | undefined,
): string | undefined => {
  const identifiers = (Array.isArray(patient.identifier) ? patient.identifier : []) as {
    system?: unknown;
    value?: unknown;
  }[];
  const chosen =
    (mrnSystem
      ? identifiers.find((i) => i?.system === mrnSystem && typeof i.value === 'string')
      : undefined) ?? identifiers.find((i) => typeof i?.value === 'string');
  return typeof chosen?.value === 'string' ? chosen.value : undefined;
};

/**
 * The patient banner of every application-host page of a patient (issue 32): name, birth date
 * with age, sex, MRN ({@link mrnOf}) and the report's status and version. A labelled region
 * (`<section aria-label="Patient">`), not a header, nav or banner landmark, so it stays in
 * `embedded` mode, which leaves the application chrome out; sticky at the top (layout.ts).
 * Empty without a patient.
 */
export const patientBanner = (
  patient: Record<string, unknown> | undefined,
  options: { readonly now: Date; readonly mrnSystem?: string; readonly report?: BannerReport },
): string => {
  if (!patient) return '';
  const name = (Array.isArray(patient.name) ? patient.name[0] : undefined) as
    | { text?: string; family?: string; given?: string[] }
    | undefined;
  const display =
    name?.text ??
    [name?.family ? name.family.toUpperCase() : undefined, (name?.given ?? []).join(' ')]
      .filter(Boolean)
      .join(', ');
  const field = (cls: string, label: string, value: string) =>
    `<span class="${cls}"><span class="banner-label">${label}</span> ${value}</span>`;
  const birthDate = typeof patient.birthDate === 'string' ? patient.birthDate : undefined;
  const age = birthDate ? ageOn(birthDate, options.now) : undefined;
  const mrn = mrnOf(patient, options.mrnSystem);
  const report = options.report;
  const parts = [
    `<span class="patient-name">${escapeHtml(display || 'Unnamed patient')}</span>`,
    birthDate
      ? field(
          'patient-dob',
          'Born',
          `${escapeHtml(birthDate)}${age !== undefined ? ` <span class="patient-age">(${age} y)</span>` : ''}`,
        )
      : '',
    typeof patient.gender === 'string' ? field('patient-sex', 'Sex', escapeHtml(patient.gender)) : '',
    mrn ? field('patient-mrn', 'MRN', escapeHtml(mrn)) : '',
    report
      ? field(
          'report-status',
          'Report',
          `${escapeHtml(REPORT_STATUS[report.status] ?? report.status)}${
            report.version ? `, version ${escapeHtml(report.version)}` : ''
          }`,
        )
      : '',
  ].filter(Boolean);
  return `<section class="patient-banner" aria-label="Patient">${parts.join('')}</section>`;
};

/**
 * The patient banner of a page ({@link patientBanner}) with the tenant's MRN system.
 * @throws {DomainError} not_found when the session's tenant is gone.
 */
export const pageBanner = async (
  page: PageContext,
  patient: ResourceRow | undefined,
  report?: BannerReport,
): Promise<string> => {
  if (!patient) return '';
  const { mrnSystem } = await readTenant(page.command.store, page.session.tenantId);
  return patientBanner(patient.resource, {
    now: page.command.now,
    ...(mrnSystem ? { mrnSystem } : {}),
    ...(report ? { report } : {}),
  });
};

/** Sends an HTML page. */
export const sendHtml = (ctx: Context, status: number, html: string): void => {
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Cache-Control', 'no-store');
  ctx.body = html;
};
