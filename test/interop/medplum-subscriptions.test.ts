/**
 * Interoperability (issue 37): Medplum's `MedplumClient` (`@medplum/core`) creates an R5
 * Subscription on casebook's data server, reads it back (without its secret) and reads
 * `Subscription/{id}/$status` once the handshake made it active.
 */
import { MedplumClient } from '@medplum/core';
import type { Bundle, Subscription, SubscriptionStatus } from '@medplum/fhirtypes';
import { expect } from 'chai';
import { REPORT_TOPIC_URL } from '../../src/domain/subscription/topics.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { type Receiver, receiver } from '../support/subscriptions.js';

/** The R5 elements this test reads. */
interface R5Subscription {
  readonly id?: string;
  readonly status?: string;
  readonly extension?: { url: string; valueString?: string }[];
}

for (const database of testDatabases) {
  describe(`@medplum/core MedplumClient subscribing on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let hook: Receiver;
    let medplum: MedplumClient;

    before(async () => {
      hook = await receiver();
      app = await startTestApp(database, {
        realClock: true,
        env: { SUBSCRIPTION_ALLOWED_ORIGINS: hook.origin, SUBSCRIPTION_POLL_MS: '100' },
      });
      await seed(app);
      const fhirUrl = new URL(app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1'));
      medplum = new MedplumClient({
        baseUrl: `${fhirUrl.origin}/`,
        fhirUrlPath: `${fhirUrl.pathname.replace(/^\//, '')}/`,
        fetch: (url: string | URL | Request, init?: RequestInit) => fetch(url, init),
        cacheTime: 0,
      });
      medplum.setBasicAuth('ehr-backend', 'general-secret-0123456789');
    });
    after(async () => {
      await app?.close();
      hook?.close();
    });

    it('createResource(Subscription) returns the secret once; readResource omits it; $status answers active', async () => {
      // @medplum/fhirtypes describes R4's Subscription; casebook speaks R5's, so the body is R5 JSON.
      const created = (await medplum.createResource({
        resourceType: 'Subscription',
        status: 'requested',
        topic: REPORT_TOPIC_URL,
        channelType: { code: 'rest-hook' },
        endpoint: hook.url('/medplum'),
        content: 'id-only',
        contentType: 'application/fhir+json',
      } as unknown as Subscription)) as unknown as R5Subscription;
      expect(created.id).to.be.a('string');
      expect(created.status).to.equal('requested');
      const secret = created.extension?.find((e) => e.url.endsWith('subscription-secret'))?.valueString;
      expect(secret).to.be.a('string');
      const read = (await medplum.readResource('Subscription', created.id!)) as unknown as R5Subscription;
      expect(read.extension ?? []).to.deep.equal([]);
      let status: SubscriptionStatus | undefined;
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline) {
        const bundle = await medplum.get<Bundle<SubscriptionStatus>>(
          medplum.fhirUrl('Subscription', created.id!, '$status'),
        );
        status = bundle.entry?.[0]?.resource;
        if (status?.status === 'active') break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(status?.resourceType).to.equal('SubscriptionStatus');
      expect(status?.status).to.equal('active');
      expect(status?.type).to.equal('query-status');
      expect(status?.subscription?.reference).to.match(new RegExp(`/Subscription/${created.id}$`));
      expect(hook.requests.some((r) => hook.status(r).type === 'handshake')).to.equal(true);
    });
  });
}
