/**
 * OperationOutcome errors on the FHIR routes (issue 3 "Rules for every request"): every error is
 * an OperationOutcome whose `issue.code` follows docs/interface.md §7 (invalid, required, business-rule,
 * duplicate, conflict, not-found, forbidden, multiple-matches, processing), with `expression`
 * where a field is at fault.
 */
import type { Context } from 'koa';
import { ZodError } from 'zod';
import { DomainError } from '../../domain/decider.js';
import { ResourceValidationError } from '../../fhir/resources.js';
import { formatPath, toProblem } from '../errors.js';

const DEFAULT_CODES: Record<number, string> = {
  400: 'invalid',
  401: 'login',
  403: 'forbidden',
  404: 'not-found',
  405: 'not-supported',
  409: 'conflict',
  410: 'deleted',
  412: 'conflict',
  413: 'too-costly',
  415: 'not-supported',
  422: 'processing',
  429: 'throttled',
  500: 'exception',
  503: 'transient',
};

export interface Issue {
  readonly severity: 'fatal' | 'error' | 'warning' | 'information';
  readonly code: string;
  readonly diagnostics: string;
  readonly expression?: string[];
}

export const operationOutcome = (issues: readonly Issue[]) => ({
  resourceType: 'OperationOutcome',
  issue: issues,
});

/** The value at a zod path inside `body`, undefined when absent. */
const valueAt = (body: unknown, path: readonly PropertyKey[]): unknown =>
  path.reduce<unknown>(
    (value, key) =>
      value !== null && typeof value === 'object' ? (value as Record<PropertyKey, unknown>)[key] : undefined,
    body,
  );

/** FHIRPath of a zod path inside a resource, e.g. `Patient.identifier[0].use`. */
const fhirPath = (resourceType: string, path: readonly PropertyKey[]) => {
  const p = formatPath(path);
  return p ? `${resourceType}.${p}` : resourceType;
};

/** Maps any thrown value to a status and OperationOutcome issues; undefined = unexpected (500). */
export const toOutcome = (
  error: unknown,
):
  | { status: number; issues: Issue[]; location?: string; headers?: Readonly<Record<string, string>> }
  | undefined => {
  if (error instanceof ResourceValidationError) {
    const issues = error.zodError.issues.flatMap((i): Issue[] => {
      if (i.code === 'unrecognized_keys')
        return i.keys.map((key) => ({
          severity: 'error',
          code: 'invalid',
          diagnostics: `${fhirPath(error.resourceType, i.path)}: element ${key} is not allowed here`,
          expression: [fhirPath(error.resourceType, [...i.path, key])],
        }));
      // zod 4 reports a missing enum/literal as invalid_value: look at the body itself.
      const missing =
        error.body !== undefined
          ? valueAt(error.body, i.path) === undefined
          : i.code === 'invalid_type' && /received undefined|required/.test(i.message);
      return [
        {
          severity: 'error',
          code: missing ? 'required' : 'invalid',
          diagnostics: `${fhirPath(error.resourceType, i.path)}: ${i.message}`,
          expression: [fhirPath(error.resourceType, i.path)],
        },
      ];
    });
    return { status: 422, issues };
  }
  const problem = toProblem(error);
  if (!problem) return undefined;
  const fhir = error instanceof DomainError ? error.fhir : {};
  const expression = error instanceof DomainError && error.expression ? [error.expression] : undefined;
  if (error instanceof ZodError)
    return {
      status: problem.status,
      issues: error.issues.map((i) => ({
        severity: 'error',
        code: 'invalid',
        diagnostics: `${formatPath(i.path) || 'request'}: ${i.message}`,
        ...(formatPath(i.path) ? { expression: [formatPath(i.path)] } : {}),
      })),
    };
  return {
    status: problem.status,
    issues: [
      {
        severity: 'error',
        code: fhir.issueCode ?? DEFAULT_CODES[problem.status] ?? 'processing',
        diagnostics: problem.detail,
        ...(expression ? { expression } : {}),
      },
    ],
    ...(fhir.location ? { location: fhir.location } : {}),
    ...(problem.headers ? { headers: problem.headers } : {}),
  };
};

/** Writes an OperationOutcome answer. */
export const sendOutcome = (ctx: Context, status: number, issues: readonly Issue[]): void => {
  ctx.status = status;
  ctx.type = 'application/fhir+json';
  ctx.body = operationOutcome(issues);
};
