/**
 * Uniform credential checks (issue 10; spec §5 rule 1): an unknown client id and a known one with
 * a wrong secret both run scrypt, so they answer 401 in about the same time and client ids cannot
 * be enumerated by timing. Compared as a ratio of medians, never as absolute times.
 */
import { expect } from 'chai';
import { basic, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';

// 1 + ROUNDS wrong secrets for one client stay under the throttle (10 a minute, src/commands/credential-guard.ts).
const ROUNDS = 8;
const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};

for (const database of testDatabases) {
  describe(`client credentials on ${database.name}`, () => {
    let app: TestApp;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    const timed401 = async (authorization: string): Promise<number> => {
      const started = performance.now();
      const res = await fetch(`${app.authUrl}/sessions/1`, { headers: { Authorization: authorization } });
      const ms = performance.now() - started;
      expect(res.status).to.equal(401);
      expect(((await res.json()) as { detail: string }).detail).to.equal('unknown client or wrong secret');
      return ms;
    };

    it('answers an unknown client and a wrong secret alike, in comparable time', async () => {
      const unknown: number[] = [];
      const wrongSecret: number[] = [];
      // Warm-up: the dummy hash is made on first use, connections open.
      await timed401(basic('nobody-at-all', 'wrong-secret-0123456789'));
      await timed401(basic('ehr-backend', 'wrong-secret-0123456789'));
      for (let i = 0; i < ROUNDS; i++) {
        unknown.push(await timed401(basic(`nobody-${i}`, 'wrong-secret-0123456789')));
        wrongSecret.push(await timed401(basic('ehr-backend', `wrong-secret-${i}`)));
      }
      const ratio = median(unknown) / median(wrongSecret);
      console.log(
        `      unknown client ${median(unknown).toFixed(1)} ms, wrong secret ${median(wrongSecret).toFixed(1)} ms (medians of ${ROUNDS}), ratio ${ratio.toFixed(2)}`,
      );
      expect(ratio).to.be.within(0.5, 2);
    });
  });
}
