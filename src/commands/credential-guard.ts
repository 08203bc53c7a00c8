/**
 * Client-secret checks under attack (docs/architecture.md "Security", docs/interface.md §5 rule 1).
 *
 * A secret is checked with scrypt (src/commands/secrets.ts): ~20–40 ms of a libuv pool thread, on
 * purpose. Unchecked, a flood of wrong secrets (or of unknown client ids, which are checked against
 * a dummy hash so that they take the same time) fills the pool and delays every legitimate first
 * check behind it. The guard bounds that work:
 *
 * - **Verified secrets are remembered** for 60 s, keyed by a SHA-256 of the claimed client id, of
 *   the secret and the stored hash (rotating the secret changes the hash, so the entry no longer
 *   matches). Within that time no scrypt runs.
 * - **Concurrent checks of the same secret share one scrypt** (20 connections opening at once cost
 *   one check, not twenty).
 * - **Failures are throttled**, counted per claimed client id (known or not, so the throttle does
 *   not tell which ids exist) and per client address. A check reserves a point of both before it
 *   runs and returns it when the secret was right, so concurrent wrong secrets cannot overrun the
 *   bound. Past it the id or address is refused without hashing for a minute (429). Given the
 *   database, the counts live in its table `credential_failures` (`rate-limiter-flexible`'s
 *   PostgreSQL store, one atomic upsert a count): every replica on the database shares them and a
 *   restart keeps them. Should the table fail, each process counts in memory meanwhile.
 *   A secret that verified before (its entry expired) is checked even then: an attacker guessing
 *   at a client's id does not lock out the client itself once it has authenticated.
 * - **At most {@link MAX_CONCURRENT_CHECKS} checks run at once** (half of libuv's default pool of
 *   four, which file and DNS work share), and at most {@link MAX_WAITING_CHECKS} wait; beyond that
 *   a check is refused at once (503) rather than queued without end.
 */
import pLimit from 'p-limit';
import {
  type RateLimiterAbstract,
  RateLimiterMemory,
  RateLimiterPostgres,
  RateLimiterRes,
} from 'rate-limiter-flexible';
import { migrate, migrationsIn } from '../db/migrations.js';
import type { Sql } from '../db/sql.js';
import { hashSecret, hashToken, randomToken, verifySecret } from './secrets.js';

/** How long a verified secret is taken without another scrypt, milliseconds. */
export const VERIFIED_TTL_MS = 60_000;
/** Wrong secrets per claimed client id in a minute before it is refused for a minute. */
export const FAILURES_PER_CLIENT = 10;
/** Wrong secrets from one client address in a minute before it is refused for a minute. */
export const FAILURES_PER_ADDRESS = 100;
/** scrypt checks running at once. */
export const MAX_CONCURRENT_CHECKS = 2;
/** scrypt checks waiting for a slot before new ones are refused. */
export const MAX_WAITING_CHECKS = 100;
const VERIFIED_MAX = 10_000;
/** How often a process deletes expired failure counts, milliseconds. */
const SWEEP_EVERY_MS = 300_000;
/** The failure counts shared through the database (rate-limiter-flexible's columns). */
const FAILURES_TABLE = 'credential_failures';

/**
 * Brings the table of failure counts ({@link FAILURES_TABLE}: `key`, `points`, `expire` epoch
 * milliseconds) to the last version of src/commands/sql/credential-failures/ (component
 * `credential-failures`; docs/architecture.md "Schema migrations"). Not a read model: counts are
 * not events, and a rebuild leaves them. Idempotent.
 * @throws what a failing migration throws (its transaction is rolled back).
 */
export const migrateCredentialFailures = async (sql: Sql): Promise<void> => {
  await migrate(
    sql,
    'credential-failures',
    migrationsIn(new URL('./sql/credential-failures/', import.meta.url)),
  );
};

/**
 * `sql` as rate-limiter-flexible's PostgreSQL client: its statements run through our handle (pool
 * or PGlite), `expire` read back as a number whatever the driver makes of a bigint.
 */
const limiterClient = (sql: Sql) => ({
  query: async (q: { text: string; values?: unknown[] }) => ({
    rows: (
      await sql.query<{ points: number; expire: string | number | bigint | null }>(q.text, q.values ?? [])
    ).map((row) => ({ ...row, expire: row.expire === null ? null : Number(row.expire) })),
  }),
});

/**
 * A limiter of `points` failures a minute per key, then a minute's refusal: in the database's
 * {@link FAILURES_TABLE} when `sql` is given (in memory while the table fails), else in memory.
 */
const failureLimiter = (keyPrefix: string, points: number, sql: Sql | undefined): RateLimiterAbstract => {
  const options = { keyPrefix, points, duration: 60, blockDuration: 60 };
  if (!sql) return new RateLimiterMemory(options);
  return new RateLimiterPostgres({
    ...options,
    storeClient: limiterClient(sql),
    storeType: 'client',
    tableName: FAILURES_TABLE,
    tableCreated: true,
    // Its own sweep is a timer that outlives the handle; CredentialGuard sweeps instead.
    clearExpiredByTimeout: false,
    insuranceLimiter: new RateLimiterMemory(options),
  });
};

/** What a check found. `retryAfterSeconds` goes to a `Retry-After` header. */
export type CredentialCheck =
  | { readonly kind: 'valid' }
  | { readonly kind: 'invalid' }
  /** This client id or address failed too often: refused without checking (429). */
  | { readonly kind: 'throttled'; readonly retryAfterSeconds: number }
  /** Too many checks are waiting already: refused without checking (503). */
  | { readonly kind: 'busy'; readonly retryAfterSeconds: number };

/**
 * One guard per Casebook (docs/architecture.md "Security"). Remembered secrets, shared scrypt runs
 * and the bound on checks at once are the process's own; the failure counts are the database's
 * when it is given (every replica's, kept across restarts).
 */
export class CredentialGuard {
  private readonly verified = new Map<string, number>();
  private readonly inFlight = new Map<string, Promise<CredentialCheck>>();
  private readonly slots = pLimit(MAX_CONCURRENT_CHECKS);
  private readonly byClient: RateLimiterAbstract;
  private readonly byAddress: RateLimiterAbstract;
  private dummyHash: Promise<string> | undefined;
  /** When this process last deleted expired counts ({@link sweep}), epoch milliseconds. */
  private sweptAt = Date.now();

  /**
   * @param hooks.onCheck called with the kind of each request's check (metrics)
   * @param hooks.onHash called for each scrypt the guard runs (metrics)
   * @param hooks.now clock in milliseconds, for the remembered secrets (tests move it)
   * @param hooks.sql the database whose `credential_failures` table ({@link migrateCredentialFailures})
   *   holds the failure counts; without it they are counted in this process's memory
   */
  constructor(
    private readonly hooks: {
      readonly onCheck?: (kind: CredentialCheck['kind']) => void;
      readonly onHash?: () => void;
      readonly now?: () => number;
      readonly sql?: Sql;
    } = {},
  ) {
    this.byClient = failureLimiter('client', FAILURES_PER_CLIENT, hooks.sql);
    this.byAddress = failureLimiter('address', FAILURES_PER_ADDRESS, hooks.sql);
  }

  private now(): number {
    return (this.hooks.now ?? Date.now)();
  }

  /**
   * Checks `secret` for the client `clientId` claims to be. `storedHash` is that client's scrypt
   * hash, or undefined for an id nobody registered (then a dummy hash is checked, and the answer
   * is `invalid`). `address` is the request's client address ('' when unknown).
   * Never throws for a wrong secret; rejects only if scrypt itself fails.
   */
  async check(
    clientId: string,
    secret: string,
    storedHash: string | undefined,
    address: string,
  ): Promise<CredentialCheck> {
    const stored = storedHash ?? (await this.dummy());
    const fingerprint = `${hashToken(clientId)}:${hashToken(secret)}:${stored}`;
    const verifiedAt = this.verified.get(fingerprint);
    if (verifiedAt !== undefined && this.now() - verifiedAt <= VERIFIED_TTL_MS)
      return this.seen({ kind: 'valid' });
    // Joined before any await, so that concurrent checks of one secret share one run.
    let pending = this.inFlight.get(fingerprint);
    if (!pending) {
      // A secret that verified before is checked again without the throttle (see above).
      // An address as it is when it is one (up to 45 characters for IPv6), else its hash: a
      // misconfigured proxy chain can hand over any string, and the table's key has 255 at most.
      const addressKey = address.length <= 64 ? address : hashToken(address);
      const keys =
        verifiedAt === undefined ? { client: hashToken(clientId), address: addressKey } : undefined;
      pending = this.run(fingerprint, secret, stored, keys).finally(() => this.inFlight.delete(fingerprint));
      this.inFlight.set(fingerprint, pending);
    }
    return this.seen(await pending);
  }

  /** One check: the throttle's reservation (unless `keys` is undefined), a slot, scrypt. */
  private async run(
    fingerprint: string,
    secret: string,
    stored: string,
    keys: { readonly client: string; readonly address: string } | undefined,
  ): Promise<CredentialCheck> {
    // Busy already: refused before the counts are touched, so a flood past the bound costs the
    // database nothing (checked again below: the reservation awaits).
    if (this.slots.pendingCount >= MAX_WAITING_CHECKS) return { kind: 'busy', retryAfterSeconds: 1 };
    if (keys) {
      this.sweep();
      const refused = await this.reserve(keys.client, keys.address);
      if (refused) return refused;
    }
    if (this.slots.pendingCount >= MAX_WAITING_CHECKS) {
      if (keys) await this.release(keys.client, keys.address);
      return { kind: 'busy', retryAfterSeconds: 1 };
    }
    const ok = await this.slots(() => {
      this.hooks.onHash?.();
      return verifySecret(secret, stored);
    });
    if (ok) {
      if (this.verified.size >= VERIFIED_MAX) this.verified.clear();
      this.verified.set(fingerprint, this.now());
      if (keys) await this.release(keys.client, keys.address);
    }
    return { kind: ok ? 'valid' : 'invalid' };
  }

  private seen(result: CredentialCheck): CredentialCheck {
    this.hooks.onCheck?.(result.kind);
    return result;
  }

  /** Takes a failure point of the client id and of the address; a refusal if either is spent. */
  private async reserve(client: string, address: string): Promise<CredentialCheck | undefined> {
    const [byClient, byAddress] = await Promise.allSettled([
      this.byClient.consume(client),
      address ? this.byAddress.consume(address) : Promise.resolve(undefined),
    ]);
    const refusals = [byClient, byAddress].flatMap((r) =>
      r.status === 'rejected' && r.reason instanceof RateLimiterRes ? [r.reason.msBeforeNext] : [],
    );
    const failure = [byClient, byAddress].find(
      (r) => r.status === 'rejected' && !(r.reason instanceof RateLimiterRes),
    );
    if (failure?.status === 'rejected') throw failure.reason;
    if (refusals.length === 0) return undefined;
    return { kind: 'throttled', retryAfterSeconds: Math.max(1, Math.ceil(Math.max(...refusals) / 1000)) };
  }

  /** Gives back the points {@link reserve} took (the secret was right, or it did not run). */
  private async release(client: string, address: string): Promise<void> {
    await Promise.all([this.byClient.reward(client), address ? this.byAddress.reward(address) : undefined]);
  }

  /**
   * Deletes counts that ended over an hour ago from the database's table, at most every 5 minutes
   * and only when a check is counted (no timer outlives the guard): ids and addresses an attacker
   * makes up do not pile up. Failing to is harmless (an expired count is never read).
   */
  private sweep(): void {
    const { sql } = this.hooks;
    if (!sql || Date.now() - this.sweptAt < SWEEP_EVERY_MS) return;
    this.sweptAt = Date.now();
    sql
      .query(`DELETE FROM ${FAILURES_TABLE} WHERE expire < $1::bigint`, [Date.now() - 3_600_000])
      .catch(() => undefined);
  }

  /** A hash of a random secret nobody knows, made once, for unknown client ids. */
  private dummy(): Promise<string> {
    this.dummyHash ??= hashSecret(randomToken());
    return this.dummyHash;
  }
}
