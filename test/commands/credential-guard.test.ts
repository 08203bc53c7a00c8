/**
 * The credential guard (src/commands/credential-guard.ts; docs/architecture.md "Security") with
 * real scrypt: remembered secrets, one scrypt for concurrent checks of one secret, failures
 * throttled per claimed client id and per address, and a bounded queue of checks.
 */
import { expect } from 'chai';
import {
  type CredentialCheck,
  CredentialGuard,
  FAILURES_PER_ADDRESS,
  FAILURES_PER_CLIENT,
  MAX_CONCURRENT_CHECKS,
  MAX_WAITING_CHECKS,
  VERIFIED_TTL_MS,
} from '../../src/commands/credential-guard.js';
import { hashSecret } from '../../src/commands/secrets.js';

const SECRET = 'right-secret-0123456789';

describe('credential guard', function () {
  this.timeout(60_000);
  let stored: string;
  let now: number;
  let hashes: number;
  let guard: CredentialGuard;

  before(async () => {
    stored = await hashSecret(SECRET);
  });
  beforeEach(() => {
    now = 1_000_000;
    hashes = 0;
    guard = new CredentialGuard({ onHash: () => hashes++, now: () => now });
  });

  const kinds = (checks: CredentialCheck[]) => {
    const counted: Record<string, number> = {};
    for (const c of checks) counted[c.kind] = (counted[c.kind] ?? 0) + 1;
    return counted;
  };

  it('remembers a verified secret for a minute, then checks it again', async () => {
    expect(await guard.check('client-a', SECRET, stored, '10.0.0.1')).to.deep.equal({ kind: 'valid' });
    expect(await guard.check('client-a', SECRET, stored, '10.0.0.1')).to.deep.equal({ kind: 'valid' });
    expect(hashes).to.equal(1);
    now += VERIFIED_TTL_MS + 1;
    expect(await guard.check('client-a', SECRET, stored, '10.0.0.1')).to.deep.equal({ kind: 'valid' });
    expect(hashes).to.equal(2);
    // A rotated secret (another stored hash) is not taken from memory.
    const rotated = await hashSecret('rotated-secret-0123456789');
    expect(await guard.check('client-a', SECRET, rotated, '10.0.0.1')).to.deep.equal({ kind: 'invalid' });
    expect(hashes).to.equal(3);
  });

  it('runs one scrypt for 30 concurrent checks of one secret', async () => {
    const checks = await Promise.all(
      Array.from({ length: 30 }, () => guard.check('client-a', SECRET, stored, '10.0.0.1')),
    );
    expect(kinds(checks)).to.deep.equal({ valid: 30 });
    expect(hashes).to.equal(1);
  });

  it(`refuses a client id after ${FAILURES_PER_CLIENT} wrong secrets, even 50 at once, without hashing`, async () => {
    const checks = await Promise.all(
      Array.from({ length: 50 }, (_, i) => guard.check('client-a', `wrong-${i}`, stored, `10.0.1.${i}`)),
    );
    expect(kinds(checks)).to.deep.equal({
      invalid: FAILURES_PER_CLIENT,
      throttled: 50 - FAILURES_PER_CLIENT,
    });
    expect(hashes).to.equal(FAILURES_PER_CLIENT);
    const refused = checks.find((c) => c.kind === 'throttled') as { retryAfterSeconds: number };
    expect(refused.retryAfterSeconds).to.be.within(1, 60);
    // The right secret, never verified, is refused too: the id is blocked, not the guess.
    expect((await guard.check('client-a', SECRET, stored, '10.0.2.1')).kind).to.equal('throttled');
    // Another client id is not.
    expect((await guard.check('client-b', SECRET, stored, '10.0.2.1')).kind).to.equal('valid');
  });

  it('keeps checking a secret that verified before while its client id is refused', async () => {
    expect((await guard.check('client-a', SECRET, stored, '10.0.0.1')).kind).to.equal('valid');
    for (let i = 0; i <= FAILURES_PER_CLIENT; i++)
      await guard.check('client-a', `wrong-${i}`, stored, '10.0.3.1');
    expect((await guard.check('client-a', 'wrong-again', stored, '10.0.3.1')).kind).to.equal('throttled');
    now += VERIFIED_TTL_MS + 1;
    const before = hashes;
    expect((await guard.check('client-a', SECRET, stored, '10.0.0.1')).kind).to.equal('valid');
    expect(hashes).to.equal(before + 1);
  });

  it('treats unknown client ids like known ones: a dummy hash, then the same throttle', async () => {
    const checks: CredentialCheck[] = [];
    for (let i = 0; i <= FAILURES_PER_CLIENT; i++)
      checks.push(await guard.check('nobody', `guess-${i}`, undefined, `10.0.4.${i}`));
    expect(kinds(checks)).to.deep.equal({ invalid: FAILURES_PER_CLIENT, throttled: 1 });
  });

  it(`refuses an address after ${FAILURES_PER_ADDRESS} wrong secrets over many client ids; other addresses pass`, async () => {
    const checks = await Promise.all(
      Array.from({ length: FAILURES_PER_ADDRESS + 20 }, (_, i) =>
        guard.check(`id-${i}`, 'guess', undefined, '10.9.9.9'),
      ),
    );
    expect(kinds(checks)).to.deep.equal({ invalid: FAILURES_PER_ADDRESS, throttled: 20 });
    expect(hashes).to.equal(FAILURES_PER_ADDRESS);
    expect((await guard.check('client-a', SECRET, stored, '10.9.9.9')).kind).to.equal('throttled');
    expect((await guard.check('client-a', SECRET, stored, '10.9.9.10')).kind).to.equal('valid');
  });

  it('refuses checks at once (busy) past the waiting bound, and hashes only those it admitted', async () => {
    const total = MAX_CONCURRENT_CHECKS + MAX_WAITING_CHECKS + 100;
    const checks = await Promise.all(
      Array.from({ length: total }, (_, i) =>
        guard.check(`id-${i}`, 'guess', undefined, `10.${i >> 8}.${i & 255}.1`),
      ),
    );
    const counted = kinds(checks);
    expect(counted.busy).to.be.greaterThan(0);
    expect(counted.invalid! + counted.busy!).to.equal(total);
    expect(counted.invalid).to.be.at.most(MAX_CONCURRENT_CHECKS + MAX_WAITING_CHECKS);
    expect(hashes).to.equal(counted.invalid);
    const busy = checks.find((c) => c.kind === 'busy') as { retryAfterSeconds: number };
    expect(busy.retryAfterSeconds).to.equal(1);
  });
});
