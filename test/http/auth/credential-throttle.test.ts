/**
 * Wrong client secrets over HTTP (src/commands/credential-guard.ts; docs/architecture.md
 * "Security"; docs/interface.md §5 rule 1), on PGlite and PostgreSQL: a client id refused after
 * repeated failures (429 with Retry-After, recorded as a refusal under the claimed client),
 * concurrent first requests of a client sharing one scrypt, and the client address of the audit
 * trail taken from X-Forwarded-For only behind configured proxies (TRUST_PROXY_HOPS).
 */

import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { registerClient } from '../../../src/commands/tenants.js';
import { loadConfig } from '../../../src/config.js';
import { PgliteSql, type Sql } from '../../../src/db/sql.js';
import { auditEventsIn } from '../../../src/fhir/audit-event.js';
import { basic, seed, startTestApp, type TestApp } from '../../support/app.js';
import { type OpenedDatabase, type TestDatabase, testDatabases } from '../../support/databases.js';
import { fhir } from '../../support/fhir.js';

const counter = async (
  metric: { get(): Promise<{ values: { value: number; labels: object }[] }> },
  labels = {},
) =>
  (await metric.get()).values
    .filter((v) =>
      Object.entries(labels).every(([k, want]) => (v.labels as Record<string, unknown>)[k] === want),
    )
    .reduce((sum, v) => sum + v.value, 0);

/** Registers an API client of tenant 1 with every system scope. */
const addClient = async (app: TestApp, clientId: string, secret: string) => {
  const ctx = app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'test' } });
  await registerClient(ctx, { clientId, tenantId: 1, secret, scopes: ['system/*.*'], projects: [] });
};

for (const database of testDatabases) {
  describe(`client credentials under attack on ${database.name}`, function () {
    this.timeout(60_000);
    let app: TestApp;
    /** The AuditEvents of the log since event `count`. */
    const auditSince = async (count: number) =>
      (await app.allEvents({ audit: true }))
        .slice(count)
        .flatMap((e) => auditEventsIn(e).map((a) => a.resource as any));

    before(async () => {
      app = await startTestApp(database, { env: { TRUST_PROXY_HOPS: '1' } });
      await seed(app);
    });
    after(() => app?.close());

    it('refuses a client id after 10 wrong secrets with 429 and Retry-After, without hashing, and records it', async () => {
      await addClient(app, 'target-client', 'target-secret-0123456789');
      const hashes = await counter(app.casebook.metrics.clientSecretHashes);
      const statuses: number[] = [];
      for (let i = 0; i < 10; i++) {
        // Each from its own address, so that only the client id's count is at stake.
        const res = await fhir(app, 'GET', '/Patient?_count=1', {
          auth: basic('target-client', `wrong-secret-${i}`),
          headers: { 'X-Forwarded-For': `203.0.113.${i + 1}` },
        });
        statuses.push(res.status);
      }
      expect(statuses).to.deep.equal(Array(10).fill(401));
      const before = (await app.allEvents({ audit: true })).length;
      const refused = await fhir(app, 'GET', '/Patient?_count=1', {
        auth: basic('target-client', 'wrong-secret-10'),
        headers: { 'X-Forwarded-For': '203.0.113.99' },
      });
      expect(refused.status).to.equal(429);
      expect(Number(refused.headers.get('Retry-After'))).to.be.within(1, 60);
      expect(refused.body.resourceType).to.equal('OperationOutcome');
      expect(refused.body.issue[0].code).to.equal('throttled');
      // The right secret is refused as well while the id is (it never verified before).
      const right = await fetch(`${app.authUrl}/sessions/1`, {
        headers: {
          Authorization: basic('target-client', 'target-secret-0123456789'),
          'X-Forwarded-For': '203.0.113.98',
        },
      });
      expect(right.status).to.equal(429);
      expect(right.headers.get('Content-Type')).to.match(/^application\/problem\+json/);
      expect(((await right.json()) as { code: string }).code).to.equal('TooManyFailedCredentials');
      expect(await counter(app.casebook.metrics.clientSecretHashes)).to.equal(hashes + 10);
      // The refusal is in the audit trail under the client it claimed to be, with its address.
      const [event] = await auditSince(before);
      expect(event.outcome.code.code).to.equal('4');
      expect(event.outcome.detail).to.deep.equal([{ text: '429 Too Many Requests' }]);
      expect(event.agent[0].who.identifier.value).to.equal('target-client');
      expect(event.agent[0].networkString).to.equal('203.0.113.99');
      expect(await counter(app.casebook.metrics.clientSecretChecks, { result: 'throttled' })).to.be.at.least(
        2,
      );
    });

    it('checks 30 concurrent first requests of a client with one scrypt, all answered', async () => {
      await addClient(app, 'burst-client', 'burst-secret-0123456789');
      const hashes = await counter(app.casebook.metrics.clientSecretHashes);
      const answers = await Promise.all(
        Array.from({ length: 30 }, () =>
          fhir(app, 'GET', '/Patient?_count=1', { auth: basic('burst-client', 'burst-secret-0123456789') }),
        ),
      );
      expect(answers.map((a) => a.status)).to.deep.equal(Array(30).fill(200));
      expect(await counter(app.casebook.metrics.clientSecretHashes)).to.equal(hashes + 1);
    });

    it('refuses an address after 100 wrong secrets over many client ids; another address still gets in', async () => {
      await addClient(app, 'bystander-client', 'bystander-secret-0123456789');
      const attacker = { 'X-Forwarded-For': '192.0.2.66' };
      // Unknown ids, each tried once: no client id reaches its own bound, only the address does.
      const statuses = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          fhir(app, 'GET', '/Patient?_count=1', {
            auth: basic(`unknown-client-${i}`, 'wrong-secret-0123456789'),
            headers: attacker,
          }).then((r) => r.status),
        ),
      );
      expect(statuses).to.deep.equal(Array(100).fill(401));
      const hashes = await counter(app.casebook.metrics.clientSecretHashes);
      const refused = await fhir(app, 'GET', '/Patient?_count=1', {
        auth: basic('bystander-client', 'bystander-secret-0123456789'),
        headers: attacker,
      });
      expect(refused.status).to.equal(429);
      expect(Number(refused.headers.get('Retry-After'))).to.be.within(1, 60);
      expect(refused.body.issue[0].code).to.equal('throttled');
      // Refused without a hash; the same client from another address is checked and let in.
      expect(await counter(app.casebook.metrics.clientSecretHashes)).to.equal(hashes);
      const elsewhere = await fhir(app, 'GET', '/Patient?_count=1', {
        auth: basic('bystander-client', 'bystander-secret-0123456789'),
        headers: { 'X-Forwarded-For': '192.0.2.67' },
      });
      expect(elsewhere.status).to.equal(200);
      // Both counters are on /metrics, by result.
      const text = await (await fetch(`${app.baseUrl}/metrics`)).text();
      expect(text).to.match(/^casebook_client_secret_checks_total\{result="throttled"\} [1-9]\d*$/m);
      expect(text).to.match(/^casebook_client_secret_checks_total\{result="invalid"\} [1-9]\d*$/m);
      expect(text).to.match(/^casebook_client_secret_hashes_total [1-9]\d*$/m);
    });

    it('answers 503 CredentialChecksBusy with Retry-After past the waiting checks, and 401 to those it checked', async () => {
      // Unknown ids from addresses of their own: no throttle applies, every one needs a hash.
      const answers = await Promise.all(
        Array.from({ length: 160 }, (_, i) =>
          fhir(app, 'GET', '/Patient?_count=1', {
            auth: basic(`busy-client-${i}`, 'wrong-secret-0123456789'),
            headers: { 'X-Forwarded-For': `198.18.0.${i + 1}` },
          }),
        ),
      );
      const busy = answers.filter((a) => a.status === 503);
      expect(answers.every((a) => a.status === 401 || a.status === 503)).to.equal(true);
      expect(busy.length).to.be.greaterThan(0);
      expect(answers.filter((a) => a.status === 401).length).to.be.at.least(100);
      expect(busy[0]!.headers.get('Retry-After')).to.equal('1');
      expect(busy[0]!.body.issue[0].code).to.equal('transient');
      expect(busy[0]!.body.issue[0].diagnostics).to.equal(
        'too many client credentials are being checked; retry shortly',
      );
    });

    it('takes the client address from the nearest X-Forwarded-For entry behind one proxy', async () => {
      const before = (await app.allEvents({ audit: true })).length;
      const res = await fhir(app, 'GET', '/Patient?_count=1', {
        headers: { 'X-Forwarded-For': '198.51.100.7, 203.0.113.9' },
      });
      expect(res.status).to.equal(200);
      const [event] = await auditSince(before);
      expect(event.agent[0].networkString).to.equal('203.0.113.9');
    });
  });

  describe(`client failure counts in the database on ${database.name}`, function () {
    this.timeout(60_000);
    /** PostgreSQL: the schema (each casebook gets a pool of its own, which it closes). */
    let opened: OpenedDatabase | undefined;
    /** PGlite: the data directory each casebook opens in turn (one process at a time). */
    let dataDir: string;
    /** One more casebook's handle on the same database. */
    const sameDatabase: TestDatabase = {
      name: database.name,
      open: async () => ({
        sql: opened ? await opened.reopen(3) : await PgliteSql.open(dataDir),
        reopen: async () => {
          throw new Error('not used');
        },
        dispose: async () => undefined,
      }),
    };
    const wrongSecrets = async (app: TestApp, clientId: string, from: number, to: number) => {
      const statuses: number[] = [];
      for (let i = from; i < to; i++) {
        const res = await fhir(app, 'GET', '/Patient?_count=1', {
          auth: basic(clientId, `wrong-secret-${i}`),
          headers: { 'X-Forwarded-For': `203.0.113.${i + 1}` },
        });
        statuses.push(res.status);
      }
      return statuses;
    };
    const countRow = async (sql: Sql, clientId: string) =>
      (
        await sql.query<{ points: number }>(`SELECT points FROM credential_failures WHERE key = $1`, [
          `client:${createHash('sha256').update(clientId).digest('hex')}`,
        ])
      )[0]?.points;

    before(async () => {
      if (database.name === 'postgres') opened = await database.open();
      else dataDir = mkdtempSync(join(tmpdir(), 'casebook-throttle-'));
    });
    after(async () => {
      await opened?.dispose();
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    });

    it('keeps a client id refused across a restart: the new process hashes nothing for it', async () => {
      const first = await startTestApp(sameDatabase, { env: { TRUST_PROXY_HOPS: '1' } });
      try {
        await seed(first);
        await addClient(first, 'restart-client', 'restart-secret-0123456789');
        expect(await wrongSecrets(first, 'restart-client', 0, 10)).to.deep.equal(Array(10).fill(401));
        expect(await countRow(first.casebook.sql, 'restart-client')).to.equal(10);
      } finally {
        await first.close();
      }

      const second = await startTestApp(sameDatabase, { env: { TRUST_PROXY_HOPS: '1' } });
      try {
        const hashes = await counter(second.casebook.metrics.clientSecretHashes);
        const refused = await fhir(second, 'GET', '/Patient?_count=1', {
          auth: basic('restart-client', 'restart-secret-0123456789'),
          headers: { 'X-Forwarded-For': '203.0.113.200' },
        });
        expect(refused.status).to.equal(429);
        expect(Number(refused.headers.get('Retry-After'))).to.be.within(1, 60);
        expect(await counter(second.casebook.metrics.clientSecretHashes)).to.equal(hashes);
      } finally {
        await second.close();
      }
    });

    it('counts an address of any length (a misconfigured proxy chain) under a key the table holds', async () => {
      const app = await startTestApp(sameDatabase, { env: { TRUST_PROXY_HOPS: '1' } });
      try {
        await seed(app);
        const long = `198.51.100.${'9'.repeat(300)}`;
        const res = await fhir(app, 'GET', '/Patient?_count=1', {
          auth: basic('nobody-client', 'wrong-secret-0123456789'),
          headers: { 'X-Forwarded-For': long },
        });
        expect(res.status).to.equal(401);
        const [row] = await app.casebook.sql.query<{ points: number }>(
          `SELECT points FROM credential_failures WHERE key = $1`,
          [`address:${createHash('sha256').update(long).digest('hex')}`],
        );
        expect(row?.points).to.equal(1);
      } finally {
        await app.close();
      }
    });

    if (database.name === 'postgres')
      it('counts one client id over two replicas: 5 wrong secrets on each, and both refuse the next', async () => {
        const one = await startTestApp(sameDatabase, { env: { TRUST_PROXY_HOPS: '1' } });
        const two = await startTestApp(sameDatabase, { env: { TRUST_PROXY_HOPS: '1' } });
        try {
          await seed(one);
          await addClient(one, 'replica-client', 'replica-secret-0123456789');
          // Alternating replicas, concurrently: the count is one atomic upsert, never lost.
          const statuses = await Promise.all([
            wrongSecrets(one, 'replica-client', 0, 5),
            wrongSecrets(two, 'replica-client', 5, 10),
          ]);
          expect(statuses.flat()).to.deep.equal(Array(10).fill(401));
          expect(await countRow(two.casebook.sql, 'replica-client')).to.equal(10);
          for (const app of [one, two]) {
            const refused = await fhir(app, 'GET', '/Patient?_count=1', {
              auth: basic('replica-client', 'replica-secret-0123456789'),
              headers: { 'X-Forwarded-For': '203.0.113.201' },
            });
            expect(refused.status).to.equal(429);
          }
        } finally {
          await one.close();
          await two.close();
        }
      });
  });

  describe(`client address without a configured proxy on ${database.name}`, () => {
    let app: TestApp;
    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    it('ignores X-Forwarded-For: a client cannot write its own address into the audit trail', async () => {
      const before = (await app.allEvents({ audit: true })).length;
      const res = await fhir(app, 'GET', '/Patient?_count=1', {
        headers: { 'X-Forwarded-For': '198.51.100.7' },
      });
      expect(res.status).to.equal(200);
      const events = (await app.allEvents({ audit: true }))
        .slice(before)
        .flatMap((e) => auditEventsIn(e).map((a) => a.resource as any));
      expect(events.map((e) => e.agent[0].networkString)).to.deep.equal(['127.0.0.1']);
    });
  });
}

describe('TRUST_PROXY_HOPS', () => {
  it('defaults to 0 and takes a small non-negative integer only', () => {
    expect(loadConfig({ DATA_DIR: 'memory://' }).trustProxyHops).to.equal(0);
    expect(loadConfig({ DATA_DIR: 'memory://', TRUST_PROXY_HOPS: '2' }).trustProxyHops).to.equal(2);
    for (const value of ['-1', '1.5', 'yes', '17'])
      expect(() => loadConfig({ DATA_DIR: 'memory://', TRUST_PROXY_HOPS: value }), value).to.throw(
        /invalid configuration: TRUST_PROXY_HOPS/,
      );
  });
});
