/**
 * Auditing at the HTTP edge (docs/architecture.md "Audit trail"; issue 14): every request to the
 * data server, the form backend, the session interface, the application host and the launcher
 * gets one AuditEvent — reads, writes, operations, session creation, handover and end, launches —
 * with its outcome, denials included. The record is in the log before the response leaves: when
 * it cannot be written, the answer is 503 instead.
 *
 * Routes say what they touched with {@link noteAudit}; authentication says who with
 * {@link noteAgent}. Without a note the entity comes from the route's `:type/:id`.
 */
import type { Context, Next } from 'koa';
import type { Casebook } from '../casebook.js';
import { newId } from '../domain/ids.js';
import type { AuditAction, AuditAgent, AuditEntity, AuditRecord } from '../fhir/audit-event.js';
import { resourceIdIn } from '../fhir/references.js';
import { DATABASE_RETRY_AFTER_SECONDS, HttpError } from './errors.js';

/** What a route tells the audit middleware. */
export interface AuditNote {
  /** A FHIR interaction (`read`, `search-type`…) or a casebook one (`launch`, `handover`…). */
  readonly interaction?: string;
  readonly action?: AuditAction;
  readonly entities?: readonly AuditEntity[];
}

/** Records what the request did, for its AuditEvent (later notes add to earlier ones). */
export const noteAudit = (ctx: Context, note: AuditNote): void => {
  const previous = (ctx.state.audit ?? {}) as AuditNote;
  ctx.state.audit = {
    ...previous,
    ...note,
    ...(note.entities ? { entities: [...(previous.entities ?? []), ...note.entities] } : {}),
  };
};

/** Records who made the request, and in which tenant. */
export const noteAgent = (ctx: Context, agent: AuditAgent, tenantId: number | null): void => {
  ctx.state.auditAgent = agent;
  ctx.state.auditTenant = tenantId;
};

const ACTIONS: Record<string, AuditAction> = { GET: 'R', HEAD: 'R', POST: 'C', PUT: 'U', DELETE: 'D' };

const defaultInteraction = (ctx: Context, action: AuditAction): string => {
  if (ctx.path.includes('$')) return 'operation';
  const params = ctx.params as { type?: string; id?: string } | undefined;
  switch (action) {
    case 'R':
      return params?.id ? 'read' : params?.type ? 'search-type' : 'read';
    case 'C':
      return 'create';
    case 'U':
      return 'update';
    case 'D':
      return 'delete';
    default:
      return 'operation';
  }
};

const defaultEntities = (ctx: Context): AuditEntity[] => {
  const params = ctx.params as { type?: string; id?: string } | undefined;
  if (!params?.type || !params.id || !/^[A-Z][A-Za-z]+$/.test(params.type)) return [];
  // A larger number than an id can be names nothing casebook holds (docs/interface.md §8).
  const id = resourceIdIn(params.id);
  if (id === undefined) return [];
  return [{ reference: `${params.type}/${id}`, ...(params.type === 'Patient' ? { patientId: id } : {}) }];
};

/** Who acted, when the command is what tells (a handover: the session its token names). */
export interface AuditWho {
  readonly agent: AuditAgent;
  readonly tenantId: number | null;
}

/** The AuditRecord of the request as noted so far, answered with `status`. */
const recordOf = (
  casebook: Casebook,
  ctx: Context,
  status: number,
  note: AuditNote,
  who?: AuditWho,
): AuditRecord => {
  // A FHIR operation (`$name`) is an execute (E) unless its route says otherwise ($everything: R).
  const action = note.action ?? (ctx.path.includes('/$') ? 'E' : (ACTIONS[ctx.method] ?? 'E'));
  return {
    id: newId(),
    tenantId: who ? who.tenantId : ((ctx.state.auditTenant as number | null | undefined) ?? null),
    interaction: note.interaction ?? defaultInteraction(ctx, action),
    action,
    recorded: casebook.clock().toISOString(),
    status,
    agent: who?.agent ?? (ctx.state.auditAgent as AuditAgent | undefined) ?? { kind: 'anonymous' },
    entities: note.entities ?? defaultEntities(ctx),
    ...(ctx.ip ? { clientAddress: ctx.ip } : {}),
    ...(ctx.state.requestId ? { requestId: ctx.state.requestId as string } : {}),
  };
};

/**
 * The `audit` option of a write command (src/commands/handler.ts `execute`): the request's
 * AuditEvent, as it will be answered when the command succeeds — `answer(result)` gives the status
 * and what to note (entities…) — appended with the command's events. Call {@link auditedWith}
 * with what `execute` returned: the middleware then records nothing more for the request, unless
 * its final status differs (an error after the write), which gets its own AuditEvent.
 * @returns undefined when the request is not audited (a path outside the audited hosts).
 */
export const auditInline =
  <R>(
    casebook: Casebook,
    ctx: Context,
    answer: (result: R) => { status: number; note: AuditNote; who?: AuditWho },
  ) =>
  (result: R): AuditRecord | undefined => {
    if (!ctx.state.audited) return undefined;
    const { status, note, who } = answer(result);
    const previous = (ctx.state.audit ?? {}) as AuditNote;
    return recordOf(
      casebook,
      ctx,
      status,
      {
        ...previous,
        ...note,
        ...(note.entities ? { entities: [...(previous.entities ?? []), ...note.entities] } : {}),
      },
      who,
    );
  };

/** Tells the middleware that `record` (from {@link auditInline}) was appended with the write. */
export const auditedWith = (ctx: Context, record: AuditRecord | undefined): void => {
  if (record) ctx.state.auditedInline = record;
};

/** Response headers an answer replaced by the audit trail's 503 keeps: the request's id, CORS. */
const KEPT_ON_FAILURE = /^(?:x-request-id|vary|access-control-)/i;

/**
 * The middleware: runs the request, then records its AuditEvent before the response is sent.
 * When the record cannot be written, the answer is replaced (its headers too: no `Location` or
 * cookie of an answer not given) by 503 `AuditTrailUnavailable` with `Retry-After`, in the host's
 * format.
 * @param audited which requests are audited (by path).
 * @param answerError writes an error answer in the host's format (src/http/app.ts).
 */
export const auditMiddleware =
  (
    casebook: Casebook,
    audited: (path: string) => boolean,
    answerError: (ctx: Context, error: unknown) => void,
  ) =>
  async (ctx: Context, next: Next): Promise<void> => {
    if (!audited(ctx.path) || ctx.method === 'OPTIONS') return next();
    ctx.state.audited = true;
    await next();
    const inline = ctx.state.auditedInline as AuditRecord | undefined;
    // Appended with the write, as answered: nothing more to record.
    if (inline && inline.status === ctx.status) return;
    const record = recordOf(casebook, ctx, ctx.status, (ctx.state.audit ?? {}) as AuditNote);
    if (record.action === 'R' && !casebook.config.auditReads) return;
    try {
      await casebook.audit.record(record);
    } catch (error) {
      // Fail closed: an answer the audit trail cannot show is not given.
      casebook.logger.error(
        { err: error, requestId: ctx.state.requestId },
        'audit record failed; answering 503',
      );
      for (const name of Object.keys(ctx.response.headers)) if (!KEPT_ON_FAILURE.test(name)) ctx.remove(name);
      answerError(
        ctx,
        new HttpError(503, 'AuditTrailUnavailable', 'the audit trail cannot be written; retry shortly', {
          'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS),
        }),
      );
    }
  };
