/**
 * Helpers for the data-server tests: FHIR requests as a client (HTTP Basic) or as a session
 * (the auth_session cookie obtained through a real handover). Every FHIR JSON response they
 * receive is checked against the FHIR JSON rules and the official R5 JSON schema (issue 13).
 */
import { expect } from 'chai';
import { GENERAL, type TestApp } from './app.js';
import { assertR5Resource } from './fhir-schema.js';

export const FHIR_JSON = 'application/fhir+json';
export const ROLE_NEW = 'https://casebook.example/fhir/role/new';

export interface FhirResponse {
  readonly status: number;
  readonly headers: Headers;
  readonly body: any;
}

/** Credentials of a request: `Authorization` header value, or `{ cookie }`. */
export type Credentials = string | { cookie: string } | null;

/** Sends one FHIR request to the app's data server. `path` is relative to {fhir_base_url}. */
export const fhir = async (
  app: TestApp,
  method: string,
  path: string,
  options: { body?: unknown; auth?: Credentials; headers?: Record<string, string> } = {},
): Promise<FhirResponse> => {
  const auth = options.auth === undefined ? GENERAL : options.auth;
  const headers: Record<string, string> = {
    Accept: FHIR_JSON,
    ...(options.body !== undefined ? { 'Content-Type': FHIR_JSON } : {}),
    ...(typeof auth === 'string' ? { Authorization: auth } : auth ? { Cookie: auth.cookie } : {}),
    ...options.headers,
  };
  const base = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
  const res = await fetch(`${base}${path.startsWith('/') ? path : `/${path}`}`, {
    method,
    headers,
    ...(options.body !== undefined
      ? { body: typeof options.body === 'string' ? options.body : JSON.stringify(options.body) }
      : {}),
  });
  const text = await res.text();
  const body = text ? JSON.parse(text) : undefined;
  if (/^application\/fhir\+json/.test(res.headers.get('content-type') ?? '') && body !== undefined) {
    assertFhirJson(body, `${method} ${path}`);
    assertR5Resource(body, `${method} ${path}`);
  }
  return { status: res.status, headers: res.headers, body };
};

/**
 * The FHIR JSON rules (FHIR R5 json.html) every response must keep, asserted on every response the
 * HTTP suites receive: no empty arrays, no empty objects, no nulls; `resourceType` on every
 * resource at the top and in Bundle entries.
 * @throws {AssertionError} naming the JSON path that breaks a rule.
 */
export const assertFhirJson = (value: unknown, where: string, path = '$'): void => {
  if (value === null) expect.fail(`${where}: null at ${path} (FHIR JSON has no nulls)`);
  if (Array.isArray(value)) {
    if (value.length === 0) expect.fail(`${where}: empty array at ${path} (FHIR JSON has no empty arrays)`);
    for (const [i, v] of value.entries()) assertFhirJson(v, where, `${path}[${i}]`);
    return;
  }
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0)
      expect.fail(`${where}: empty object at ${path} (FHIR JSON has no empty objects)`);
    if (path === '$' && typeof (value as { resourceType?: unknown }).resourceType !== 'string')
      expect.fail(`${where}: the response is not a FHIR resource (no resourceType)`);
    for (const [k, v] of entries) assertFhirJson(v, where, `${path}.${k}`);
  }
};

/** Asserts an OperationOutcome with `status` and issue `code`; returns its first issue. */
export const expectOutcome = (res: FhirResponse, status: number, code: string) => {
  expect(res.status, JSON.stringify(res.body)).to.equal(status);
  expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
  expect(res.body.resourceType).to.equal('OperationOutcome');
  expect(res.body.issue.map((i: { code: string }) => i.code)).to.include(code);
  return res.body.issue[0] as { code: string; diagnostics: string; expression?: string[] };
};

/**
 * Creates a session through POST /sessions and hands it over; returns the cookie and the session.
 * `body` is the POST /sessions body (spec §2.1).
 */
export const sessionCookie = async (
  app: TestApp,
  body: Record<string, unknown>,
  auth = GENERAL,
): Promise<{ cookie: { cookie: string }; session: any }> => {
  const res = await fetch(`${app.authUrl}/sessions`, {
    method: 'POST',
    headers: { Authorization: auth, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const session = (await res.json()) as any;
  expect(res.status, JSON.stringify(session)).to.equal(201);
  const handover = await fetch(
    `${app.authUrl}/sessions/$handover?${new URLSearchParams({ token: session.handover_token, next: `${app.casebook.config.appUrl}/` })}`,
    { redirect: 'manual' },
  );
  expect(handover.status).to.equal(303);
  const cookie = handover.headers
    .getSetCookie()
    .find((c) => c.startsWith('auth_session='))!
    .split(';')[0]!;
  return { cookie: { cookie }, session };
};

/** The ids in a Bundle's entries, as `Type/id`, optionally only those of one search mode. */
export const entryRefs = (bundle: any, mode?: 'match' | 'include'): string[] =>
  (bundle.entry ?? [])
    .filter((e: any) => !mode || e.search?.mode === mode)
    .map((e: any) => `${e.resource.resourceType}/${e.resource.id}`);
