/**
 * One error mapping for the HTTP edge (CONVENTIONS.md "HTTP edge"): domain errors, zod validation
 * errors and body-parser errors become 4xx with a clear message; a database that cannot answer
 * (classified by the db layer, src/db/sql.ts `isDatabaseUnavailable`) becomes 503 with
 * `Retry-After`; anything else is logged (without request data) and answered 500. Auth-host routes
 * answer `application/problem+json` (RFC 9457), FHIR routes an OperationOutcome, the app host and
 * the launcher HTML pages (src/http/app.ts).
 */
import type { Context } from 'koa';
import { ZodError } from 'zod';
import { isDatabaseUnavailable } from '../db/sql.js';
import { DomainError, type DomainErrorKind } from '../domain/decider.js';
import { EventIdConflict, UnstorableEvent, WrongExpectedVersion } from '../eventstore/port.js';
import { ReadModelUnavailable } from '../queries/read-models.js';
import { statusText } from '../status-text.js';

const STATUS: Record<DomainErrorKind, number> = {
  invalid: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  gone: 410,
  precondition_failed: 412,
  unprocessable: 422,
};

/** One problem found in the request, with where it is (a dotted/bracketed field path). */
export interface Problem {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly errors?: readonly { readonly path: string; readonly message: string }[];
  /** Headers the answer carries whatever its format (`Retry-After`, `Allow`…). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** Seconds a client waits before retrying a request the database could not answer. */
export const DATABASE_RETRY_AFTER_SECONDS = 1;

/** An error the edge raises itself with a chosen status (authentication, content type…). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Renders a zod path as `fhirContext[0].identifier.system`. */
export const formatPath = (path: readonly PropertyKey[]): string =>
  path.reduce<string>(
    (acc, key) => (typeof key === 'number' ? `${acc}[${key}]` : acc ? `${acc}.${String(key)}` : String(key)),
    '',
  );

/** Maps any thrown value to a problem; `undefined` means an unexpected (5xx) error. */
export const toProblem = (error: unknown): Problem | undefined => {
  if (error instanceof DomainError)
    return {
      status: STATUS[error.kind],
      code: error.code,
      detail: error.message,
      ...(error.expression ? { errors: [{ path: error.expression, message: error.message }] } : {}),
    };
  if (error instanceof HttpError)
    return {
      status: error.status,
      code: error.code,
      detail: error.message,
      ...(Object.keys(error.headers).length > 0 ? { headers: error.headers } : {}),
    };
  if (error instanceof ZodError) {
    const errors = error.issues.map((i) => ({ path: formatPath(i.path), message: i.message }));
    return {
      status: 400,
      code: 'InvalidRequest',
      detail: errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)).join('; '),
      errors,
    };
  }
  if (error instanceof WrongExpectedVersion)
    return {
      status: 409,
      code: 'ConcurrentUpdate',
      detail: 'the resource was changed concurrently; retry the request',
    };
  if (error instanceof EventIdConflict) return { status: 409, code: 'Conflict', detail: error.message };
  if (error instanceof UnstorableEvent)
    return {
      status: 400,
      code: 'InvalidCharacters',
      detail: `the request holds ${error.message.replace(/^an event holds /, '')}`,
    };
  // A read model this write needs is stopped (docs/architecture.md "Projections"): not the client's fault.
  if (error instanceof ReadModelUnavailable)
    return { status: 503, code: 'ReadModelUnavailable', detail: error.message };
  // The connection was lost, or none can be made: the request may well succeed in a moment.
  if (isDatabaseUnavailable(error))
    return {
      status: 503,
      code: 'DatabaseUnavailable',
      detail: 'the database cannot be reached at the moment; retry shortly',
      headers: { 'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS) },
    };
  const status =
    (error as { status?: unknown; statusCode?: unknown })?.status ??
    (error as { statusCode?: unknown })?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const raw = error instanceof Error ? error.message : 'bad request';
    const detail =
      status === 400 && /JSON|token|Unexpected/i.test(raw)
        ? `the request body is not valid JSON: ${raw}`
        : raw;
    return { status, code: status === 413 ? 'PayloadTooLarge' : 'InvalidRequest', detail };
  }
  return undefined;
};

/** Writes a problem as `application/problem+json`. */
export const sendProblem = (ctx: Context, problem: Problem): void => {
  ctx.status = problem.status;
  ctx.type = 'application/problem+json';
  ctx.body = {
    type: 'about:blank',
    title: statusText(problem.status),
    status: problem.status,
    code: problem.code,
    detail: problem.detail,
    ...(problem.errors ? { errors: problem.errors } : {}),
  };
};
