/**
 * The hospital launcher's pages at {launch_url} (docs/interface.md §1.6, §4.6; issue 6):
 * - `GET {launch_url}?patient=…&encounter=…[&supervisor=…][&user=…][&dob=…][&sex=…]` validates the
 *   launch, sends the transaction Bundle and creates the session (over HTTP, with the launcher's
 *   client credentials), then sends the browser through the handover to the app (303);
 * - `GET {launch_url}/submitted?response=QuestionnaireResponse/<id>&task=Task/<id>`, the session's
 *   post_submit_redirect: tells the clinician the report was submitted, with its export status
 *   (only to the submitting user's session or a same-tenant session whose scopes cover the response).
 * Errors are HTML pages (the app's error middleware treats this prefix like the app host).
 */

import Router from '@koa/router';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { type LaunchOutcome, launch } from '../../commands/launch.js';
import { verifySecret } from '../../commands/secrets.js';
import type { ClientPrincipal } from '../../commands/sessions.js';
import { DomainError } from '../../domain/decider.js';
import { idInReference } from '../../fhir/references.js';
import { type ExportStatus, exportStatus } from '../../integration/export/status.js';
import { REFUSAL_TEXT, verifyLaunch } from '../../integration/launch-signature.js';
import { LaunchError, parseLaunchParams } from '../../integration/launcher.js';
import { readVisible } from '../../queries/visibility.js';
import { escapeHtml, layout } from '../app/layout.js';
import { type AuditNote, auditedWith, auditInline, noteAgent, noteAudit } from '../audit.js';
import { globalRedirectOrigins, sessionFromCookie } from '../auth/sessions.js';
import { HttpError } from '../errors.js';
import { clientPrincipal, sessionPrincipal } from '../fhir/principal.js';

/**
 * The export status of a QuestionnaireResponse (`exportStatus` of the export module); a failure to
 * read it is logged and shown as "unknown", never as an error: the report itself was submitted.
 * Without a queued export and without an export sink, the export is `disabled`.
 */
export const readExportStatus = async (
  casebook: Casebook,
  responseId: number,
): Promise<ExportStatus | undefined> => {
  try {
    const status = await exportStatus(casebook.sql, responseId, casebook.config);
    return status ?? (casebook.config.exportSink ? undefined : { state: 'disabled', attempts: 0 });
  } catch (err) {
    casebook.logger.warn({ err, responseId }, 'export status unavailable');
    return undefined;
  }
};

/**
 * The clinician-facing text of an export status: a short label and a sentence. Until retrying has
 * ended (ReportExportAbandoned) a failed attempt is not a failure to the clinician: the report is
 * saved and still being sent (issue 15).
 */
export const exportStatusText = (status: ExportStatus | undefined): { label: string; detail: string } => {
  if (!status) return { label: 'unknown', detail: 'The export status of this report is not known.' };
  switch (status.state) {
    case 'delivered':
      return {
        label: 'delivered',
        detail: `The report was delivered to the hospital system${status.deliveredAt ? ` at ${status.deliveredAt}` : ''}.`,
      };
    case 'pending':
    case 'failed':
      // Not final: casebook retries (issue 15). Only an abandoned export is a failure to report.
      return {
        label: 'sending',
        detail: 'The report is saved in casebook and is still being sent to the hospital system.',
      };
    case 'abandoned':
      return {
        label: 'failed',
        detail:
          'Delivery to the hospital system failed. The report is saved in casebook. Please contact IT support.',
      };
    case 'skipped':
      return {
        label: 'not sent',
        detail:
          'The report is saved in casebook; it was written before the export was set up and was not sent.',
      };
    case 'disabled':
      return { label: 'disabled', detail: 'Export to the hospital system is not configured.' };
  }
};

const notConfigured = (detail: string) =>
  new HttpError(503, 'LauncherNotConfigured', `the launcher is not configured: ${detail}`);

/**
 * The API client the launcher acts as (LAUNCHER_CLIENT_ID, checked against LAUNCHER_CLIENT_SECRET):
 * its tenant, scopes and projects govern what a launch may write.
 * @throws {HttpError} 503 when it is not configured or does not match a client.
 */
const launcherClient = async (casebook: Casebook): Promise<ClientPrincipal> => {
  const { clientId, clientSecret } = casebook.config.launcher;
  if (!clientId || !clientSecret)
    throw notConfigured('LAUNCHER_CLIENT_ID and LAUNCHER_CLIENT_SECRET are not set');
  const row = await casebook.clients.find(clientId);
  if (!row || !(await verifySecret(clientSecret, row.secretHash)))
    throw notConfigured('LAUNCHER_CLIENT_ID/LAUNCHER_CLIENT_SECRET do not match an API client');
  return {
    clientId: row.clientId,
    tenantId: row.tenantId,
    scopes: [...row.scopes],
    projects: [...row.projects],
  };
};

const reference = (ctx: Context, name: string, type: string): number => {
  const raw = ctx.query[name];
  const value = typeof raw === 'string' ? raw.trim() : undefined;
  const id = value ? idInReference(value, type) : undefined;
  if (id === undefined)
    throw new HttpError(400, 'InvalidReference', `${name} must be a reference such as ${type}/123`);
  return id;
};

const submittedPage = (responseId: number, taskId: number, status: ExportStatus | undefined): string => {
  const text = exportStatusText(status);
  return layout({
    title: 'Report submitted',
    chrome: 'standalone',
    body: `<main id="main" class="outcome"><div class="card"><h1>Report submitted</h1>
<p class="notice" role="status">Your report was submitted.</p>
<p class="meta">QuestionnaireResponse/${responseId} · Task/${taskId}</p>
<h2>Export to the hospital system</h2>
<p>Status: <span class="badge export-${escapeHtml(text.label)}">${escapeHtml(text.label)}</span></p>
<p class="hint">${escapeHtml(text.detail)}</p>
<p class="hint">You can close this window and return to your clinical system.</p></div></main>`,
  });
};

/** What the AuditEvent of a launch names: the patient's resources it opened and its session. */
const launchNote = (o: LaunchOutcome): AuditNote => ({
  entities: [
    { reference: `Patient/${o.patientId}`, patientId: o.patientId },
    { reference: `Encounter/${o.encounterId}`, patientId: o.patientId },
    { reference: `Task/${o.taskId}`, patientId: o.patientId },
    { reference: `Session/${o.session.sessionId}`, patientId: o.patientId },
  ],
});

/** Builds the launcher's router (mounted at the path of {launch_url}). */
export const launchRouter = (casebook: Casebook): Router => {
  const router = new Router();

  router.get('/', async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    ctx.set('Referrer-Policy', 'no-referrer');
    const { config } = casebook;
    const { launcher } = config;
    // Who is launching comes first: a link that is not trusted gets 401 and learns nothing more.
    let signature: { nonce: string; ts: number; key: number } | undefined;
    const verified = verifyLaunch(ctx.query, launcher.sharedSecrets, casebook.clock());
    if (verified.ok) signature = { nonce: verified.nonce, ts: verified.ts, key: verified.key };
    else if (!(verified.reason === 'unsigned' && launcher.allowUnsigned)) {
      if (launcher.sharedSecrets.length === 0 && !launcher.allowUnsigned)
        throw notConfigured('LAUNCHER_SHARED_SECRET is not set, so no launch link can be verified');
      casebook.logger.warn({ requestId: ctx.state.requestId, reason: verified.reason }, 'launch refused');
      throw new HttpError(401, 'LaunchNotTrusted', REFUSAL_TEXT[verified.reason]);
    }
    let request: ReturnType<typeof parseLaunchParams>;
    try {
      request = parseLaunchParams(ctx.query, casebook.clock());
    } catch (error) {
      if (error instanceof LaunchError) throw new HttpError(error.status, 'LaunchFailed', error.message);
      throw error;
    }
    noteAudit(ctx, { interaction: 'launch', action: 'E' });
    const client = await launcherClient(casebook);
    noteAgent(ctx, { kind: 'client', clientId: client.clientId }, client.tenantId);
    let outcome: Awaited<ReturnType<typeof launch>>;
    try {
      outcome = await launch(
        casebook.context({
          tenantId: client.tenantId,
          actor: { type: 'client', id: client.clientId },
          requestId: ctx.state.requestId as string,
        }),
        client,
        clientPrincipal(client),
        request,
        {
          systems: launcher,
          postSubmitRedirect: `${config.launchUrl}/submitted`,
          globalOrigins: globalRedirectOrigins(casebook),
          ...(signature ? { signature } : {}),
          updateDemographics: launcher.updateDemographics,
          scopes: launcher.scopes,
          audit: auditInline(casebook, ctx, (o: LaunchOutcome) => ({ status: 303, note: launchNote(o) })),
        },
      );
    } catch (error) {
      if (error instanceof DomainError && error.code === 'LaunchReplayed')
        throw new HttpError(401, 'LaunchNotTrusted', REFUSAL_TEXT.replayed);
      throw error;
    }
    auditedWith(ctx, outcome.audited);
    noteAudit(ctx, launchNote(outcome));
    if (outcome.disagreements.length > 0)
      // An OperationOutcome warning in the log; the values themselves are patient data and stay out.
      casebook.logger.warn(
        {
          requestId: ctx.state.requestId,
          outcome: {
            resourceType: 'OperationOutcome',
            issue: outcome.disagreements.map((element) => ({
              severity: 'warning',
              code: 'business-rule',
              diagnostics: `the launch link's ${element} disagrees with Patient/${outcome.patientId}; ${
                launcher.updateDemographics ? 'the record was updated' : 'the record was kept'
              }`,
              expression: [`Patient.${element}`],
            })),
          },
        },
        'launch demographics disagree with the patient record',
      );
    const next = `${config.appUrl}/external/v1?task=Task/${outcome.taskId}`;
    const params = new URLSearchParams({ token: outcome.session.handoverToken, next });
    ctx.status = 303;
    ctx.redirect(`${config.authUrl}/sessions/$handover?${params.toString()}`);
    ctx.status = 303;
  });

  // Issue 15: the page tells whether a report reached the hospital: only the clinician's session
  // (or another session of the tenant whose scopes cover the QuestionnaireResponse) may see it.
  router.get('/submitted', async (ctx) => {
    const responseId = reference(ctx, 'response', 'QuestionnaireResponse');
    const taskId = reference(ctx, 'task', 'Task');
    ctx.set('Cache-Control', 'no-store');
    // Only the submitting user's session, or a session of the same tenant whose scopes cover the
    // response, sees its state (issue 15); another tenant learns nothing, not even that it exists.
    const session = await sessionFromCookie(ctx, casebook);
    const principal = await sessionPrincipal(casebook, session);
    const row = await readVisible(casebook.sql, principal, 'QuestionnaireResponse', responseId);
    if (!row || row.deleted)
      throw new HttpError(
        404,
        'NotFound',
        `QuestionnaireResponse/${responseId} is not known in this session's tenant`,
      );
    noteAudit(ctx, {
      interaction: 'report-status',
      action: 'R',
      entities: [{ reference: `QuestionnaireResponse/${responseId}`, patientId: row.patientId ?? null }],
    });
    const status = await readExportStatus(casebook, responseId);
    ctx.status = 200;
    ctx.type = 'text/html; charset=utf-8';
    ctx.set('Cache-Control', 'no-store');
    ctx.body = submittedPage(responseId, taskId, status);
  });

  return router;
};
