/**
 * Secrets (docs/architecture.md "Security"): client secrets are stored as salted scrypt hashes and compared in
 * constant time; handover tokens and session cookies are 256-bit random values stored as SHA-256
 * hashes (high-entropy values need no salt or work factor).
 */
import * as crypto from 'node:crypto';
import { createHash, randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';

const scryptAsync = promisify(scrypt) as (
  password: string,
  salt: Buffer,
  keylen: number,
  options: object,
) => Promise<Buffer>;
const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 };

/** Hashes a client secret: `scrypt$N$r$p$<salt b64>$<hash b64>`. */
export const hashSecret = async (secret: string): Promise<string> => {
  const salt = randomBytes(16);
  const hash = await scryptAsync(secret, salt, SCRYPT.keylen, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${hash.toString('base64')}`;
};

/** Checks a secret against a stored hash in constant time. Malformed hashes verify as false. */
export const verifySecret = async (secret: string, stored: string): Promise<boolean> => {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !n || !r || !p || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scryptAsync(secret, Buffer.from(salt, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
  });
  return actual.length === expected.length && timingSafeEqual(actual, expected);
};

/** A 256-bit random value, base64url (43 characters). */
export const randomToken = (): string => randomBytes(32).toString('base64url');

/** Node's one-shot digest (20.12 and later): a third of the time of a Hash object per call. */
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string, encoding: 'hex') => string }).hash;

/** SHA-256 of a token, hex (on every request that carries a secret or a cookie). */
export const hashToken = (token: string): string =>
  oneShotHash ? oneShotHash('sha256', token, 'hex') : createHash('sha256').update(token).digest('hex');

/** A generated client secret: 32 random bytes, base64url. */
export const generateSecret = (): string => randomBytes(32).toString('base64url');
