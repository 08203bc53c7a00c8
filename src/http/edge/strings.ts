/**
 * FHIR's string rule at the HTTP edge (issue 10 "Strings are checked at the edge"): every string a
 * client sends — the decoded path, query parameter names and values, the parameters of an
 * `If-None-Exist` header, JSON body values and object keys, form fields, and the search URLs of a
 * transaction Bundle's entries — must be a valid FHIR string (src/fhir/strings.ts). A violation
 * is refused before any route runs, so nothing reaches the event log that the read models cannot
 * store. Basic-auth credentials are checked where they are decoded (src/http/auth/client-auth.ts).
 */
import type { Context, Middleware } from 'koa';
import { DomainError } from '../../domain/decider.js';
import {
  escapeForbidden,
  findJsonStringViolation,
  isFhirString,
  type JsonStringViolation,
} from '../../fhir/strings.js';

const RULE =
  'FHIR strings may not contain characters below U+0020 other than tab, CR and LF, nor lone surrogates';
const RESOURCE_TYPE = /^[A-Z][A-Za-z]{0,63}$/;
/** A request target of printable ASCII with no `%`: it cannot carry a control character or a surrogate. */
const PLAIN_URL = /^[\x20-\x24\x26-\x7e]*$/;

/** Whether the whole of `url` percent-decodes (as UTF-8) to a string FHIR allows. */
const decodesToFhirString = (url: string): boolean => {
  try {
    return isFhirString(decodeURIComponent(url));
  } catch {
    return false; // a malformed escape or an encoded surrogate: the part-by-part check decides
  }
};

/** decodeURIComponent that leaves a malformed escape as it is (it cannot hide a character then). */
const decode = (text: string): string => {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
};

/** The parameters of a query string (`a=1&b=2`, with or without `?`), decoded, as a JSON value. */
const queryParameters = (query: string): Record<string, string[]> => {
  const parameters: Record<string, string[]> = {};
  for (const [name, value] of new URLSearchParams(query))
    Object.defineProperty(parameters, name, {
      value: [...(Object.hasOwn(parameters, name) ? parameters[name]! : []), value],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  return parameters;
};

/** The decoded path and query of a URL-ish string (a transaction entry's `request.url`). */
const urlParts = (url: string): unknown[] => {
  const at = url.indexOf('?');
  const path = at < 0 ? url : url.slice(0, at);
  return [decode(path), at < 0 ? {} : queryParameters(url.slice(at + 1))];
};

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The search URLs a transaction or batch Bundle carries in `entry[i].request` (`url`,
 * `ifNoneExist`), decoded as the transaction will decode them.
 */
const bundleRequestViolation = (body: Record<string, unknown>): JsonStringViolation | undefined => {
  if (!Array.isArray(body.entry)) return undefined;
  for (const [i, entry] of body.entry.entries()) {
    const request = isObject(entry) && isObject(entry.request) ? entry.request : undefined;
    if (!request) continue;
    for (const field of ['url', 'ifNoneExist', 'ifMatch', 'ifNoneMatch', 'ifModifiedSince'] as const) {
      const value = request[field];
      if (typeof value !== 'string') continue;
      const found = findJsonStringViolation(urlParts(value));
      if (found) return { ...found, path: `Bundle.entry[${i}].request.${field}`, inKey: false };
    }
  }
  return undefined;
};

const refuse = (
  kind: 'invalid' | 'unprocessable',
  where: string,
  violation: JsonStringViolation,
  expression: string,
): DomainError =>
  new DomainError(
    kind,
    'InvalidCharacter',
    `${where}${violation.inKey ? ' (an element name)' : ''} contains a ${violation.reason}: ${RULE}`,
    expression,
    { issueCode: 'invalid' },
  );

/**
 * Checks the strings of a request's path, query and relevant headers.
 * @throws {DomainError} `invalid` (400) naming the parameter, header or `path`.
 */
export const checkRequestLineStrings = (ctx: Context): void => {
  // Nothing to find (most requests): printable ASCII without a percent escape decodes to itself,
  // and a target that decodes whole to valid FHIR text has valid parts (an escape never spans a
  // `/`, `?`, `&` or `=`). Otherwise the parts are decoded one by one, to name the bad one.
  if ((PLAIN_URL.test(ctx.url) || decodesToFhirString(ctx.url)) && !ctx.get('If-None-Exist')) return;
  const path = findJsonStringViolation(ctx.path.split('/').map(decode));
  if (path) throw refuse('invalid', 'the request path', path, 'path');
  const query = findJsonStringViolation(ctx.query);
  if (query) {
    const name = query.path.replace(/\[\d+\]$/, '');
    throw refuse('invalid', `the query parameter ${name}`, query, name);
  }
  const ifNoneExist = ctx.get('If-None-Exist');
  const header = ifNoneExist ? findJsonStringViolation(queryParameters(ifNoneExist)) : undefined;
  if (header) throw refuse('invalid', 'the If-None-Exist header', header, 'If-None-Exist');
};

/**
 * Checks every string of a parsed body (JSON values and keys, form fields). A JSON body that is a
 * FHIR resource (`resourceType`) on a FHIR route is answered 422 with the element's FHIRPath
 * (`Patient.identifier[0].value`); anything else 400 with the field's path.
 * @throws {DomainError} `unprocessable` (422) or `invalid` (400), with the element as `expression`.
 */
export const checkBodyStrings = (body: unknown, fhirRoute: boolean): void => {
  if (body === undefined) return;
  const resourceType =
    fhirRoute &&
    isObject(body) &&
    typeof body.resourceType === 'string' &&
    RESOURCE_TYPE.test(body.resourceType)
      ? body.resourceType
      : undefined;
  const found =
    findJsonStringViolation(body, resourceType ?? '') ??
    (resourceType === 'Bundle' && isObject(body) ? bundleRequestViolation(body) : undefined);
  if (!found) return;
  const expression = found.path || escapeForbidden(resourceType ?? 'body');
  throw refuse(resourceType ? 'unprocessable' : 'invalid', expression, found, expression);
};

/**
 * Koa middleware (after {@link boundedBody}): applies the FHIR string rule to the request line,
 * the relevant headers and the parsed body before any route runs.
 * @param isFhirRoute whether a path is on the data server or form backend (422 for resources).
 * @throws {DomainError} 400/422 as {@link checkRequestLineStrings} and {@link checkBodyStrings}.
 */
export const fhirStringRule =
  (isFhirRoute: (path: string) => boolean): Middleware =>
  async (ctx, next) => {
    checkRequestLineStrings(ctx);
    checkBodyStrings(ctx.request.body, isFhirRoute(ctx.path));
    await next();
  };
