/**
 * Identifiers of events, audit streams and AuditEvents: UUIDv7 (RFC 9562 §5.7), ordered by time so
 * that new ones land together at the end of a B-tree index instead of all over it; and the random
 * bytes of other values that are not secret (IVs, key ids).
 */
import { randomFillSync } from 'node:crypto';
import { v7 } from 'uuid';

/**
 * Random bits for {@link newId} and {@link nonSecretRandomBytes}, refilled 4 KiB at a time from
 * the OS's CSPRNG: uuid's own source asks for 16 bytes per identifier, about 3 % of the serving
 * thread under a load of audited reads, and a `crypto.randomBytes` call of a few bytes 4–7 µs
 * on this machine's OpenSSL, 0.1–0.3 µs from the pool (docs/performance.md "Ids: UUIDv7 from a random pool"). Each byte is
 * handed out once.
 */
const pool = new Uint8Array(4096);
let used = pool.length;

/** `n` (≤ 4096) bytes of the pool, as a view valid until the next call. */
const pooledRandom = (n: number): Uint8Array => {
  if (used + n > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += n;
  return pool.subarray(used - n, used);
};

/** A new UUIDv7 as its 36-character string (`0193…-7…-…`). */
export const newId = (): string => v7({ rng: () => pooledRandom(16) });

/**
 * `n` random bytes (1–4096) for values that are random but not secret: AES-GCM initialisation
 * vectors, the ids of data keys. Never for keys, tokens or salts (those come from
 * `crypto.randomBytes`, so that no future secret waits in memory).
 * @throws {RangeError} for `n` outside 1–4096.
 */
export const nonSecretRandomBytes = (n: number): Buffer => {
  if (!Number.isInteger(n) || n < 1 || n > pool.length)
    throw new RangeError(`1–${pool.length} bytes, not ${n}`);
  return Buffer.from(pooledRandom(n));
};
