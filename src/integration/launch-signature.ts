/**
 * Signed launch links (docs/interface.md §4.6; issue 12), as EHRs sign their "web links": the EHR
 * adds `ts` (Unix time, seconds), `nonce` (16–128 characters of `[A-Za-z0-9_-]`) and `sig` to the
 * launch parameters. `sig` is the unpadded base64url HMAC-SHA256, keyed with a shared secret, of
 * the canonical string: every query parameter except `sig`, sorted by name (then by value), each
 * written `name=value` with RFC 3986 percent-encoding (`encodeURIComponent`), joined with `&`.
 *
 * A launch is accepted when the signature matches under one of the configured secrets (compared in
 * constant time; several secrets allow rotation), `ts` is within ±{@link MAX_SKEW_SECONDS} of the
 * server clock, and the nonce was never used (recorded by the launch command, race-free).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** How far `ts` may be from the server clock, seconds (either way). */
export const MAX_SKEW_SECONDS = 300;
const NONCE = /^[A-Za-z0-9_-]{16,128}$/;
const TS = /^\d{1,12}$/;

type Query = Readonly<Record<string, string | readonly string[] | undefined>>;

/** Every (name, value) pair of a query, repeated parameters included. */
const pairsOf = (query: Query): [string, string][] =>
  Object.entries(query).flatMap(([name, raw]) =>
    raw === undefined
      ? []
      : (typeof raw === 'string' ? [raw] : raw).map((value): [string, string] => [name, value]),
  );

/**
 * The canonical string of a launch query: every parameter but `sig`, sorted by name then value,
 * `encodeURIComponent(name)=encodeURIComponent(value)`, joined with `&`.
 */
export const canonicalString = (query: Query): string =>
  pairsOf(query)
    .filter(([name]) => name !== 'sig')
    .sort(([a, x], [b, y]) => (a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0))
    .map(([name, value]) => `${encodeURIComponent(name)}=${encodeURIComponent(value)}`)
    .join('&');

/** The signature of a canonical string: unpadded base64url HMAC-SHA256 keyed with `secret`. */
export const signCanonical = (canonical: string, secret: string): string =>
  createHmac('sha256', secret).update(canonical, 'utf8').digest('base64url');

/** A fresh nonce: 24 random bytes, base64url (32 characters). */
export const newNonce = (): string => randomBytes(24).toString('base64url');

/**
 * Signs launch parameters: adds `ts` (from `now`) and a `nonce` unless given, then `sig`.
 * @returns the query parameters in the order to write them.
 */
export const signLaunch = (
  params: Readonly<Record<string, string>>,
  secret: string,
  now: Date,
  nonce: string = newNonce(),
): URLSearchParams => {
  const all: Record<string, string> = { ...params, ts: String(Math.floor(now.getTime() / 1000)), nonce };
  const query = new URLSearchParams(all);
  query.set('sig', signCanonical(canonicalString(all), secret));
  return query;
};

/** Why a launch link is refused (shown to the clinician, logged for IT). */
export type LaunchRefusal = 'unsigned' | 'malformed' | 'bad-signature' | 'expired' | 'not-yet-valid';

/** The reasons, as the error page says them. */
export const REFUSAL_TEXT: Record<LaunchRefusal | 'replayed', string> = {
  unsigned: 'the launch link is not signed (ts, nonce and sig are required)',
  malformed: 'the launch link has a malformed signature, time stamp or nonce',
  'bad-signature': 'the launch link has a bad signature: it was changed or signed with another key',
  expired: `the launch link has expired (it is valid for ${MAX_SKEW_SECONDS / 60} minutes)`,
  'not-yet-valid': 'the launch link is dated in the future: check the clocks of the EHR and casebook',
  replayed: 'the launch link was already used: open the report again from the clinical system',
};

export type Verified =
  | { readonly ok: true; readonly nonce: string; readonly ts: number; readonly key: number }
  | { readonly ok: false; readonly reason: LaunchRefusal };

const single = (query: Query, name: string): string | undefined => {
  const raw = query[name];
  return typeof raw === 'string' ? raw : undefined;
};

/**
 * Verifies a signed launch query against `secrets` at `now`. Every secret is tried, in constant
 * time per comparison.
 * @returns the nonce, the time stamp and the index of the secret that matched, or why not.
 */
export const verifyLaunch = (query: Query, secrets: readonly string[], now: Date): Verified => {
  const sig = single(query, 'sig');
  const ts = single(query, 'ts');
  const nonce = single(query, 'nonce');
  if (query.sig === undefined && query.ts === undefined && query.nonce === undefined)
    return { ok: false, reason: 'unsigned' };
  if (!sig || !ts || !nonce || !TS.test(ts) || !NONCE.test(nonce) || !/^[A-Za-z0-9_-]{43}$/.test(sig))
    return { ok: false, reason: 'malformed' };
  const given = Buffer.from(sig, 'base64url');
  const canonical = canonicalString(query);
  let key = -1;
  secrets.forEach((secret, index) => {
    const expected = Buffer.from(signCanonical(canonical, secret), 'base64url');
    if (expected.length === given.length && timingSafeEqual(expected, given) && key < 0) key = index;
  });
  if (key < 0) return { ok: false, reason: 'bad-signature' };
  const skew = Math.floor(now.getTime() / 1000) - Number(ts);
  if (skew > MAX_SKEW_SECONDS) return { ok: false, reason: 'expired' };
  if (skew < -MAX_SKEW_SECONDS) return { ok: false, reason: 'not-yet-valid' };
  return { ok: true, nonce, ts: Number(ts), key };
};
