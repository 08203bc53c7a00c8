/**
 * The session interface on {auth_url} (docs/interface.md §4.1, §2.1–2.4, §3.1, §5 rules 1–3, §7).
 */
import Router from '@koa/router';
import { parseCookie, stringifySetCookie } from 'cookie';
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { hashToken } from '../../commands/secrets.js';
import {
  type CreatedSession,
  createSession,
  endSession,
  type HandedOver,
  handOverSession,
} from '../../commands/sessions.js';
import { resourceIdIn } from '../../fhir/references.js';
import { findSession, findSessionByCookie, type SessionRow } from '../../queries/sessions.js';
import { inFrame, sendFramePage } from '../app/error-page.js';
import { type AuditNote, auditedWith, auditInline, noteAgent, noteAudit } from '../audit.js';
import { HttpError } from '../errors.js';
import { authenticateClient } from './client-auth.js';
import { createSessionBody, handoverParams } from './sessions.schema.js';

/** docs/interface.md §4.1 rule 3, §5 rule 2: the session cookie's name. */
export const SESSION_COOKIE = 'auth_session';

const reference = (type: string, id: number | null) =>
  id === null ? null : { type, reference: `${type}/${id}` };

/** docs/interface.md §2.3: the 201 body, exactly these fields. */
const createdBody = (s: CreatedSession) => ({
  id: s.sessionId,
  handover_token: s.handoverToken,
  active: false,
  user: reference('Practitioner', s.userId),
  patient: reference('Patient', s.patientId),
  encounter: reference('Encounter', s.encounterId),
  data_tenant: { id: s.tenant.id, name: s.tenant.name },
  deployment_mode: s.deploymentMode,
  fhir_server: { address: null, scope: s.scopes },
  post_submit_redirect: s.postSubmitRedirect,
  expired_timestamp: s.expiresAt,
});

/** docs/interface.md §2.4: the read body. `active` is false once ended or expired. */
export const sessionBody = (s: SessionRow, now: Date) => ({
  id: s.id,
  user: reference('Practitioner', s.userId),
  data_tenant: { id: s.tenantId, name: s.tenantName },
  patient: reference('Patient', s.patientId),
  encounter: reference('Encounter', s.encounterId),
  active: s.status === 'active' && now < s.expiresAt,
  expired_timestamp: s.expiresAt.toISOString(),
  created_timestamp: s.createdAt.toISOString(),
  last_modified_timestamp: s.lastModifiedAt.toISOString(),
  deployment_mode: s.deploymentMode,
  fhir_server: { address: null, scope: s.scopes },
});

const sessionIdParam = (ctx: Context): number => {
  const raw = (ctx.params as { id?: string }).id ?? '';
  const id = resourceIdIn(raw);
  if (id === undefined)
    throw new HttpError(
      404,
      'SessionNotFound',
      'no such session in this data tenant (session ids are integers)',
    );
  return id;
};

/**
 * Reads the `auth_session` cookie and returns the active session it belongs to.
 * @throws {HttpError} 401 when the cookie is missing, unknown, ended or expired.
 */
export const sessionFromCookie = async (ctx: Context, casebook: Casebook): Promise<SessionRow> => {
  const cookie = parseCookie(ctx.get('Cookie'))[SESSION_COOKIE];
  if (!cookie) throw new HttpError(401, 'SessionRequired', `the ${SESSION_COOKIE} cookie is required`);
  const session = await findSessionByCookie(casebook.sql, hashToken(cookie), casebook.clock());
  if (!session) throw new HttpError(401, 'SessionInvalid', 'the session has ended, expired or is unknown');
  noteAgent(
    ctx,
    { kind: 'session', sessionId: session.id, practitionerId: session.userId },
    session.tenantId,
  );
  return session;
};

/** Allowed redirect origins for every tenant: the app host and ALLOWED_REDIRECT_ORIGINS. */
export const globalRedirectOrigins = (casebook: Casebook): string[] => [
  new URL(casebook.config.appUrl).origin,
  new URL(casebook.config.launchUrl).origin,
  ...casebook.config.allowedRedirectOrigins,
];

/** What the AuditEvent of a session creation says. */
const sessionCreated = (created: CreatedSession): AuditNote => ({
  interaction: 'session-create',
  action: 'C',
  entities: [{ reference: `Session/${created.sessionId}`, patientId: created.patientId }],
});

/** Builds the router of the session interface (mounted at the path of {auth_url}). */
export const sessionsRouter = (casebook: Casebook): Router => {
  const router = new Router();
  const requestId = (ctx: Context) => ctx.state.requestId as string;

  router.post('/sessions', async (ctx) => {
    const client = await authenticateClient(ctx, casebook);
    if (!ctx.is('application/json'))
      throw new HttpError(
        415,
        'UnsupportedMediaType',
        'POST /sessions takes a JSON body (Content-Type: application/json)',
      );
    const body = createSessionBody.parse(ctx.request.body);
    const command = casebook.context({
      tenantId: client.tenantId,
      actor: { type: 'client', id: client.clientId },
      requestId: requestId(ctx),
    });
    const created = await createSession(
      command,
      client,
      {
        ...(body.scope != null ? { scope: body.scope } : {}),
        ...(body.patient != null ? { patient: body.patient } : {}),
        ...(body.encounter != null ? { encounter: body.encounter } : {}),
        ...(body.user != null ? { user: body.user } : {}),
        fhirContext: body.fhirContext ?? [],
        deploymentMode: body.deployment_mode ?? 'embedded',
        ...(body.post_submit_redirect != null ? { postSubmitRedirect: body.post_submit_redirect } : {}),
        ...(body.post_cancel_redirect != null ? { postCancelRedirect: body.post_cancel_redirect } : {}),
      },
      globalRedirectOrigins(casebook),
      auditInline(casebook, ctx, (c: CreatedSession) => ({ status: 201, note: sessionCreated(c) })),
    );
    auditedWith(ctx, created.audited);
    noteAudit(ctx, sessionCreated(created));
    ctx.status = 201;
    ctx.set('Location', `${casebook.config.authUrl}/sessions/${created.sessionId}`);
    ctx.set('Cache-Control', 'no-store');
    ctx.body = createdBody(created);
  });

  const handover = async (ctx: Context, params: unknown) => {
    const { token, next } = handoverParams.parse(params);
    if (inFrame(ctx) && ctx.get('Sec-Fetch-Site') === 'cross-site') {
      // docs/interface.md §5 rule 5: a frame of another site would drop the SameSite=Strict cookie
      // and lose the single-use token; the link is offered in a new window instead.
      sendFramePage(ctx, `${ctx.path}?${new URLSearchParams({ token, next })}`);
      return;
    }
    const command = casebook.context({
      tenantId: null,
      actor: { type: 'system', id: 'handover' },
      requestId: requestId(ctx),
    });
    noteAudit(ctx, { interaction: 'session-handover', action: 'U' });
    const handedOver = (h: HandedOver) => ({
      agent: { kind: 'session', sessionId: h.sessionId, practitionerId: h.userId } as const,
      tenantId: h.tenantId,
      entities: [{ reference: `Session/${h.sessionId}`, patientId: h.patientId }],
    });
    const result = await handOverSession(
      command,
      token,
      next,
      globalRedirectOrigins(casebook),
      auditInline(casebook, ctx, (h: HandedOver) => {
        const { agent, tenantId, entities } = handedOver(h);
        return { status: 303, note: { entities }, who: { agent, tenantId } };
      }),
    );
    auditedWith(ctx, result.audited);
    const { agent, tenantId, entities } = handedOver(result);
    noteAgent(ctx, agent, tenantId);
    noteAudit(ctx, { entities });
    ctx.status = 303;
    ctx.set('Cache-Control', 'no-store');
    ctx.set('Referrer-Policy', 'no-referrer');
    ctx.append(
      'Set-Cookie',
      stringifySetCookie(SESSION_COOKIE, result.cookie, {
        httpOnly: true,
        secure: true,
        sameSite: 'strict',
        path: '/',
        expires: new Date(result.expiresAt),
      }),
    );
    ctx.set('Location', result.next);
    ctx.body = '';
  };
  router.get('/sessions/$handover', (ctx) => handover(ctx, ctx.query));
  router.post('/sessions/$handover', (ctx) => {
    if (!ctx.is('application/x-www-form-urlencoded', 'application/json'))
      throw new HttpError(
        415,
        'UnsupportedMediaType',
        'POST /sessions/$handover takes a form-encoded body with token and next',
      );
    return handover(ctx, ctx.request.body);
  });

  router.get('/sessions/current', async (ctx) => {
    const session = await sessionFromCookie(ctx, casebook);
    noteAudit(ctx, {
      interaction: 'session-read',
      entities: [{ reference: `Session/${session.id}`, patientId: session.patientId }],
    });
    ctx.set('Cache-Control', 'no-store');
    ctx.body = sessionBody(session, casebook.clock());
  });

  router.get('/sessions/:id', async (ctx) => {
    const client = await authenticateClient(ctx, casebook);
    noteAudit(ctx, {
      interaction: 'session-read',
      entities: [{ reference: `Session/${sessionIdParam(ctx)}` }],
    });
    const session = await findSession(casebook.sql, sessionIdParam(ctx), client.tenantId);
    if (!session) throw new HttpError(404, 'SessionNotFound', 'no such session in this data tenant');
    ctx.set('Cache-Control', 'no-store');
    ctx.body = sessionBody(session, casebook.clock());
  });

  router.delete('/sessions/:id', async (ctx) => {
    const client = await authenticateClient(ctx, casebook);
    const command = casebook.context({
      tenantId: client.tenantId,
      actor: { type: 'client', id: client.clientId },
      requestId: requestId(ctx),
    });
    noteAudit(ctx, {
      interaction: 'session-end',
      action: 'D',
      entities: [{ reference: `Session/${sessionIdParam(ctx)}` }],
    });
    const { audited } = await endSession(
      command,
      sessionIdParam(ctx),
      client.tenantId,
      auditInline<void>(casebook, ctx, () => ({ status: 204, note: {} })),
    );
    auditedWith(ctx, audited);
    ctx.status = 204;
  });

  return router;
};
