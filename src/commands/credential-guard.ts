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
 *   bound. Past it the id or address is refused without hashing for a minute (429).
 *   A secret that verified before (its entry expired) is checked even then: an attacker guessing
 *   at a client's id does not lock out the client itself once it has authenticated.
 * - **At most {@link MAX_CONCURRENT_CHECKS} checks run at once** (half of libuv's default pool of
 *   four, which file and DNS work share), and at most {@link MAX_WAITING_CHECKS} wait; beyond that
 *   a check is refused at once (503) rather than queued without end.
 */
import pLimit from 'p-limit';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
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

/** What a check found. `retryAfterSeconds` goes to a `Retry-After` header. */
export type CredentialCheck =
  | { readonly kind: 'valid' }
  | { readonly kind: 'invalid' }
  /** This client id or address failed too often: refused without checking (429). */
  | { readonly kind: 'throttled'; readonly retryAfterSeconds: number }
  /** Too many checks are waiting already: refused without checking (503). */
  | { readonly kind: 'busy'; readonly retryAfterSeconds: number };

/** One guard per Casebook: its counts are the process's own (docs/architecture.md "Security"). */
export class CredentialGuard {
  private readonly verified = new Map<string, number>();
  private readonly inFlight = new Map<string, Promise<CredentialCheck>>();
  private readonly slots = pLimit(MAX_CONCURRENT_CHECKS);
  private readonly byClient = new RateLimiterMemory({
    keyPrefix: 'client',
    points: FAILURES_PER_CLIENT,
    duration: 60,
    blockDuration: 60,
  });
  private readonly byAddress = new RateLimiterMemory({
    keyPrefix: 'address',
    points: FAILURES_PER_ADDRESS,
    duration: 60,
    blockDuration: 60,
  });
  private dummyHash: Promise<string> | undefined;

  /**
   * @param hooks.onCheck called with the kind of each request's check (metrics)
   * @param hooks.onHash called for each scrypt the guard runs (metrics)
   * @param hooks.now clock in milliseconds, for the remembered secrets (tests move it)
   */
  constructor(
    private readonly hooks: {
      readonly onCheck?: (kind: CredentialCheck['kind']) => void;
      readonly onHash?: () => void;
      readonly now?: () => number;
    } = {},
  ) {}

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
      const keys = verifiedAt === undefined ? { client: hashToken(clientId), address } : undefined;
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
    if (keys) {
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

  /** A hash of a random secret nobody knows, made once, for unknown client ids. */
  private dummy(): Promise<string> {
    this.dummyHash ??= hashSecret(randomToken());
    return this.dummyHash;
  }
}
