/**
 * Bounded request-body parsing at the HTTP edge (issue 10 "Bounded parsing"): JSON and
 * form-encoded bodies are read with a size limit, decoded (`Content-Encoding`), checked for UTF-8
 * and, for JSON, for nesting depth by scanning the text, all before anything parses them into
 * objects, so no body can exhaust memory, the stack or the event loop in domain code.
 *
 * Every refusal is an {@link HttpError} that says which limit or rule it is: 413 for the size
 * limits, 415 for an unsupported content encoding or charset, 400 for a corrupt encoding, bytes
 * that are not UTF-8, JSON that nests too deeply or does not parse. The error middleware maps it to
 * the host's error format (OperationOutcome, problem+json or an HTML page).
 */
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { Context, Middleware } from 'koa';
import { DomainError } from '../../domain/decider.js';
import { formatPath, HttpError } from '../errors.js';
import { findLossyNumber } from './json-numbers.js';

declare module 'koa' {
  interface Request {
    /**
     * The parsed body of a JSON or form-encoded request (POST, PUT, PATCH, DELETE), set by
     * {@link boundedBody}: a JSON object or array, or a form's fields (a repeated name → string[]).
     */
    body?: unknown;
  }
}

/** The largest JSON body accepted, in bytes, both as sent and after `Content-Encoding` (1 MiB). */
export const MAX_JSON_BODY_BYTES = 1_048_576;
/** The largest form-encoded body accepted, in bytes, as sent and decoded (64 KiB). */
export const MAX_FORM_BODY_BYTES = 65_536;
/** The deepest nesting of JSON arrays and objects accepted (`{}` is depth 1). */
export const MAX_JSON_DEPTH = 64;
/** The most fields a form-encoded body may have. */
export const MAX_FORM_FIELDS = 1_000;
/**
 * Bytes of request bodies the process holds at once (32 MiB): read, parsed and handled until the
 * answer. Each authenticated request may send up to 1 MiB, which parses into several times as
 * much; 1,000 at once took the server to 1.5 GB and a few thousand would exhaust its heap.
 */
export const MAX_BODY_BYTES_IN_FLIGHT = 32 * 1_048_576;

const JSON_TYPES = ['application/json', 'application/fhir+json'];
const FORM_TYPE = 'application/x-www-form-urlencoded';
const PARSED_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

type Decoder = (body: Buffer, options: zlib.ZlibOptions & zlib.BrotliOptions) => Promise<Buffer>;
const DECODERS: Readonly<Record<string, { name: string; decode: Decoder } | undefined>> = {
  identity: undefined,
  gzip: { name: 'gzip', decode: promisify(zlib.gunzip) as Decoder },
  'x-gzip': { name: 'gzip', decode: promisify(zlib.gunzip) as Decoder },
  deflate: { name: 'deflate', decode: promisify(zlib.inflate) as Decoder },
  br: { name: 'Brotli', decode: promisify(zlib.brotliDecompress) as Decoder },
};

const tooLarge = (limit: number, what: string) =>
  new HttpError(413, 'PayloadTooLarge', `the ${what} is larger than the limit of ${limit} bytes`);

/** What {@link boundedBody} parses the request's body as: JSON, a form, or nothing (undefined). */
const bodyKind = (ctx: Context): 'json' | 'form' | undefined => {
  if (!PARSED_METHODS.has(ctx.method)) return undefined;
  return ctx.is(JSON_TYPES) ? 'json' : ctx.is(FORM_TYPE) ? 'form' : undefined;
};

/** Whether {@link boundedBody} will read and parse this request's body (a JSON or form body). */
export const hasBody = (ctx: Context): boolean => bodyKind(ctx) !== undefined;

/**
 * Reads a request stream into one buffer, refusing more than `limit` bytes. On refusal it lets
 * the rest of the body flow away unread instead of destroying the stream, so the connection stays
 * usable and the client still reads the 413.
 * @throws {HttpError} 413 past the limit; 400 when the client aborts the body.
 */
const readLimited = (stream: NodeJS.ReadableStream, limit: number, what: string): Promise<Buffer> =>
  new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      stream.removeListener('error', onError);
      stream.removeListener('aborted', onAborted);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        stream.resume();
        reject(tooLarge(limit, what));
      } else chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = () => {
      cleanup();
      reject(new HttpError(400, 'IncompleteBody', 'the request body was not received completely'));
    };
    const onAborted = onError;
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
    stream.on('aborted', onAborted);
  });

/**
 * Undoes the request's `Content-Encoding` (identity, gzip, deflate, br), keeping the output within
 * `limit` bytes.
 * @throws {HttpError} 415 for another or a stacked encoding; 400 when the body is not validly
 *   encoded; 413 when it decodes to more than `limit` bytes.
 */
const decodeContent = async (ctx: Context, raw: Buffer, limit: number, what: string): Promise<Buffer> => {
  const encoding = (ctx.get('Content-Encoding') || 'identity').trim().toLowerCase();
  if (!Object.hasOwn(DECODERS, encoding))
    throw new HttpError(
      415,
      'UnsupportedContentEncoding',
      `Content-Encoding ${JSON.stringify(encoding.slice(0, 40))} is not supported (use identity, gzip, deflate or br)`,
    );
  const decoder = DECODERS[encoding];
  if (!decoder) return raw;
  try {
    return await decoder.decode(raw, { maxOutputLength: limit });
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE')
      throw tooLarge(limit, `decoded ${what}`);
    throw new HttpError(
      400,
      'InvalidContentEncoding',
      `the body is declared as Content-Encoding ${encoding} but is not valid ${decoder.name} data`,
    );
  }
};

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The body as text. @throws {HttpError} 415 for a charset other than UTF-8; 400 for bytes that are not UTF-8. */
const utf8Text = (ctx: Context, body: Buffer): string => {
  const charset = ctx.request.charset;
  if (charset && charset !== 'utf-8' && charset !== 'utf8')
    throw new HttpError(
      415,
      'UnsupportedCharset',
      `charset ${JSON.stringify(charset.slice(0, 40))} is not supported (use utf-8)`,
    );
  try {
    return UTF8.decode(body);
  } catch {
    throw new HttpError(400, 'InvalidUtf8', 'the request body is not valid UTF-8');
  }
};

/**
 * How deeply the arrays and objects of a JSON text nest (`{}` is 1, `{"a":[1]}` is 2), scanning
 * the text once without recursion; strings are skipped, so brackets inside them do not count.
 * Stops as soon as the depth exceeds `max`. The text need not be valid JSON.
 * @returns true when some array or object lies deeper than `max`.
 */
export const jsonNestsDeeperThan = (text: string, max: number): boolean => {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
};

/**
 * Parses a JSON body: empty is `{}`; otherwise an object or array nested at most
 * {@link MAX_JSON_DEPTH} deep, whose numbers JavaScript reads as written
 * (src/http/edge/json-numbers.ts: no `1e400`, no integer a double rounds).
 * @throws {HttpError} 400 when it nests too deeply, does not parse, or is a bare scalar;
 *   {DomainError} 400 `UnrepresentableNumber` (issue code `value`, the element as expression) for
 *   a number it cannot carry.
 */
export const parseJsonBody = (text: string): unknown => {
  if (text.trim() === '') return {};
  if (jsonNestsDeeperThan(text, MAX_JSON_DEPTH))
    throw new HttpError(
      400,
      'JsonTooDeep',
      `the JSON body nests arrays and objects deeper than the limit of ${MAX_JSON_DEPTH} levels`,
    );
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new HttpError(
      400,
      'InvalidJson',
      `the request body is not valid JSON: ${error instanceof Error ? error.message.slice(0, 200) : 'syntax error'}`,
    );
  }
  if (parsed === null || typeof parsed !== 'object')
    throw new HttpError(400, 'InvalidJson', 'the JSON body must be an object or an array');
  const lossy = findLossyNumber(text);
  if (lossy) {
    const resourceType = (parsed as { resourceType?: unknown }).resourceType;
    const root =
      typeof resourceType === 'string' && /^[A-Z][A-Za-z]{0,63}$/.test(resourceType) ? resourceType : '';
    const where = formatPath([...(root ? [root] : []), ...lossy.path]) || 'body';
    throw new DomainError(
      'invalid',
      'UnrepresentableNumber',
      `${where}: the number ${lossy.literal} ${lossy.reason}`,
      where,
      { issueCode: 'value' },
    );
  }
  return parsed;
};

/**
 * Parses a form-encoded body: each name once as a string, a repeated name as a string[]; names
 * are kept as sent (no nesting, no dots or brackets interpreted: the report editor's field names
 * carry Questionnaire linkIds such as `1.2`).
 * @throws {HttpError} 413 with more than {@link MAX_FORM_FIELDS} fields.
 */
export const parseFormBody = (text: string): Record<string, string | string[]> => {
  const form: Record<string, string | string[]> = {};
  let count = 0;
  for (const [name, value] of new URLSearchParams(text)) {
    if (++count > MAX_FORM_FIELDS)
      throw new HttpError(
        413,
        'TooManyFields',
        `the form has more than the limit of ${MAX_FORM_FIELDS} fields`,
      );
    const existing = Object.hasOwn(form, name) ? form[name] : undefined;
    // defineProperty: a field called `__proto__` is an ordinary field, never the prototype.
    Object.defineProperty(form, name, {
      value:
        existing === undefined ? value : Array.isArray(existing) ? [...existing, value] : [existing, value],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return form;
};

/**
 * Koa middleware: parses JSON (`application/json`, `application/fhir+json`) and form-encoded
 * bodies of POST, PUT, PATCH and DELETE into `ctx.request.body`, within the limits above. Other
 * content types are left unread (the routes refuse them with 415).
 *
 * Bodies in flight share `bytesInFlight` (default {@link MAX_BODY_BYTES_IN_FLIGHT}): a request
 * reserves its declared `Content-Length` (its size limit when it declares none or is encoded, since
 * decoding may grow it) from before reading it until it is answered. One that does not fit is
 * refused at once, unread: 503 `TooManyBodies` with `Retry-After: 1` (docs/interface.md §8).
 * @throws {HttpError} 400, 413, 415 or 503 as described here and in this module's header.
 */
export const boundedBody = (options: { bytesInFlight?: number } = {}): Middleware => {
  const capacity = options.bytesInFlight ?? MAX_BODY_BYTES_IN_FLIGHT;
  let held = 0;
  return async (ctx, next) => {
    const kind = bodyKind(ctx);
    if (!kind) return next();
    // A smaller limit set for this request (src/http/edge/authenticate.ts: a handover's body).
    const limit = Math.min(
      kind === 'json' ? MAX_JSON_BODY_BYTES : MAX_FORM_BODY_BYTES,
      (ctx.state.bodyLimit as number | undefined) ?? Number.POSITIVE_INFINITY,
    );
    const what = kind === 'json' ? 'JSON body' : 'form body';
    const declared = ctx.get('Content-Length') === '' ? Number.NaN : Number(ctx.get('Content-Length'));
    if (Number.isFinite(declared) && declared > limit) throw tooLarge(limit, what);
    const encoded = !['', 'identity'].includes(ctx.get('Content-Encoding').trim().toLowerCase());
    const reserved = Number.isFinite(declared) && declared >= 0 && !encoded ? declared : limit;
    if (held + reserved > capacity)
      throw new HttpError(
        503,
        'TooManyBodies',
        'the server holds as many request bodies as it can at once; retry shortly',
        { 'Retry-After': '1' },
      );
    held += reserved;
    try {
      const raw = await readLimited(ctx.req, limit, what);
      const text = utf8Text(ctx, await decodeContent(ctx, raw, limit, what));
      ctx.request.body = kind === 'json' ? parseJsonBody(text) : parseFormBody(text);
      return await next();
    } finally {
      held -= reserved;
    }
  };
};
