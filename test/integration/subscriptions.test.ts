/**
 * FHIR R5 topic-based Subscriptions (issue 37), on PGlite and on the PostgreSQL server, against
 * real HTTP receivers started here: topics, the Subscription's life (secret shown once, handshake,
 * validation, allow-list), notifications decided from the log with their event numbers, id-only
 * and full-resource payloads, the patient filter, tenant isolation, the signature checked with the
 * README's own snippet, `$events` equal to what was delivered, and a receiver down while 50
 * reports are submitted.
 */
import { expect } from 'chai';
import { REPORT_TOPIC_URL, TASK_TOPIC_URL } from '../../src/domain/subscription/topics.js';
import { GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir, ROLE_NEW, sessionCookie } from '../support/fhir.js';
import { type Received, type Receiver, readmeVerifier, receiver } from '../support/subscriptions.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a truthy value. */
const eventually = async <T>(check: () => Promise<T> | T, what: string, timeoutMs = 20_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
};

const QUESTIONNAIRE = 'https://forms.example.org/Questionnaire/subscriptions-ct';

const newPatient = async (app: TestApp, auth = GENERAL): Promise<string> => {
  const res = await fhir(app, 'POST', '/Patient', {
    body: { resourceType: 'Patient', name: [{ family: 'Doe' }] },
    auth,
  });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return res.body.id;
};

/** A completed report about `patientId`: its id. */
const submitReport = async (app: TestApp, patientId: string, auth = GENERAL, text = 'no findings') => {
  const res = await fhir(app, 'POST', '/QuestionnaireResponse', {
    body: {
      resourceType: 'QuestionnaireResponse',
      questionnaire: QUESTIONNAIRE,
      status: 'completed',
      subject: { reference: `Patient/${patientId}` },
      item: [{ linkId: 'findings', answer: [{ valueString: text }] }],
    },
    auth,
  });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return res.body.id as string;
};

const subscription = (endpoint: string, extra: Record<string, unknown> = {}) => ({
  resourceType: 'Subscription',
  status: 'requested',
  topic: REPORT_TOPIC_URL,
  channelType: {
    system: 'http://terminology.hl7.org/CodeSystem/subscription-channel-type',
    code: 'rest-hook',
  },
  endpoint,
  content: 'id-only',
  contentType: 'application/fhir+json',
  ...extra,
});

const SECRET_EXT = /subscription-secret$/;

/** Creates a subscription and waits until it is active: its id and secret. */
const subscribe = async (app: TestApp, body: Record<string, unknown>, auth = GENERAL) => {
  const res = await fhir(app, 'POST', '/Subscription', { body, auth });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  const secret = res.body.extension?.find((e: { url: string }) => SECRET_EXT.test(e.url))?.valueString;
  expect(secret, 'the secret, shown once').to.be.a('string').with.length.greaterThan(30);
  const id = res.body.id as string;
  await eventually(async () => {
    const read = await fhir(app, 'GET', `/Subscription/${id}`, { auth });
    return read.body.status === 'active';
  }, `Subscription/${id} active`);
  return { id, secret: secret as string };
};

const eventNumbers = (received: Received[], r: Receiver) =>
  received.flatMap((x) =>
    r.status(x).notificationEvent.map((e: { eventNumber: string }) => Number(e.eventNumber)),
  );

for (const database of testDatabases) {
  describe(`FHIR R5 Subscriptions on ${database.name}`, function () {
    this.timeout(240_000);
    let app: TestApp;
    let hook: Receiver;

    before(async () => {
      hook = await receiver();
      app = await startTestApp(database, {
        realClock: true,
        env: {
          SUBSCRIPTION_ALLOWED_ORIGINS: hook.origin,
          SUBSCRIPTION_POLL_MS: '100',
          SUBSCRIPTION_RETRY_BASE_MS: '100',
          SUBSCRIPTION_RETRY_MAX_MS: '1000',
          SUBSCRIPTION_ERROR_AFTER: '2s',
        },
      });
      await seed(app);
    });
    after(async () => {
      await app?.close();
      hook?.close();
    });
    beforeEach(() => {
      hook.state.status = 200;
    });

    it('publishes the report and Task topics at GET SubscriptionTopic, each readable by id', async () => {
      const res = await fhir(app, 'GET', '/SubscriptionTopic');
      expect(res.status).to.equal(200);
      const topics = res.body.entry.map((e: { resource: any }) => e.resource);
      const report = topics.find((t: { url: string }) => t.url === REPORT_TOPIC_URL);
      expect(report.resourceTrigger[0].resource).to.equal('QuestionnaireResponse');
      expect(report.description).to.contain('completed');
      expect(report.canFilterBy.map((f: { filterParameter: string }) => f.filterParameter)).to.deep.equal([
        'patient',
        'encounter',
        'questionnaire',
        'status',
      ]);
      expect(topics.map((t: { url: string }) => t.url)).to.include(TASK_TOPIC_URL);
      const read = await fhir(app, 'GET', `/SubscriptionTopic/${report.id}`);
      expect(read.status).to.equal(200);
      expect(read.body.url).to.equal(REPORT_TOPIC_URL);
      expect((await fhir(app, 'GET', '/SubscriptionTopic/nope')).status).to.equal(404);
      expect((await fhir(app, 'GET', '/SubscriptionTopic', { auth: null })).status).to.equal(401);
    });

    it('refuses what it cannot deliver with 4xx and writes nothing', async () => {
      const before = (await app.allEvents()).length;
      const cases: [Record<string, unknown>, number, RegExp][] = [
        [subscription(hook.url(), { topic: 'https://example.org/unknown' }), 422, /SubscriptionTopic/],
        [subscription(hook.url(), { channelType: { code: 'websocket' } }), 422, /rest-hook/],
        [subscription('https://not-allowed.example.org/hook'), 422, /subscription origins/],
        [subscription('http://127.0.0.2:9/hook'), 422, /subscription origins/],
        [subscription(hook.url(), { content: 'everything' }), 422, /content/],
        [
          subscription(hook.url(), { filterBy: [{ filterParameter: 'colour', value: 'red' }] }),
          422,
          /filterParameter/,
        ],
        [subscription(hook.url(), { parameter: [{ name: 'Authorization', value: 'x' }] }), 422, /parameter/],
        [subscription(hook.url(), { heartbeatPeriod: -1 }), 422, /heartbeatPeriod/],
      ];
      for (const [body, status, message] of cases) {
        const res = await fhir(app, 'POST', '/Subscription', { body });
        expect(res.status, JSON.stringify(res.body)).to.equal(status);
        expect(JSON.stringify(res.body)).to.match(message);
      }
      expect((await fhir(app, 'POST', '/Subscription', { body: '{', auth: GENERAL })).status).to.equal(400);
      expect((await app.allEvents()).length).to.equal(before);
    });

    it('creates a Subscription: 201 with the secret once, a handshake, active; reads and searches omit the secret; off and delete', async () => {
      const { id } = await subscribe(app, subscription(hook.url('/life')));
      const handshake = hook.requests.find(
        (r) => hook.status(r).type === 'handshake' && hook.status(r).subscription.reference.endsWith(id),
      );
      expect(handshake, 'a handshake').to.not.equal(undefined);
      const read = await fhir(app, 'GET', `/Subscription/${id}`);
      expect(read.status).to.equal(200);
      expect(JSON.stringify(read.body)).to.not.match(/subscription-secret/);
      expect(read.body).to.include({
        status: 'active',
        topic: REPORT_TOPIC_URL,
        endpoint: hook.url('/life'),
      });
      const search = await fhir(app, 'GET', '/Subscription');
      expect(search.body.entry.map((e: { resource: { id: string } }) => e.resource.id)).to.include(id);
      expect(JSON.stringify(search.body)).to.not.match(/subscription-secret/);
      // Another tenant does not see it.
      expect((await fhir(app, 'GET', `/Subscription/${id}`, { auth: MANAGED })).status).to.equal(404);
      // A session never manages subscriptions.
      const patientId = await newPatient(app);
      const { cookie } = await sessionCookie(app, {
        patient: Number(patientId),
        scope: 'patient/*.* system/Subscription.cruds',
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:test:staff', value: 'dr-subs' },
            role: ROLE_NEW,
          },
        ],
      });
      const bySession = await fhir(app, 'GET', '/Subscription', { auth: cookie });
      expect(bySession.status, JSON.stringify(bySession.body)).to.equal(403);
      const off = await fhir(app, 'PUT', `/Subscription/${id}`, {
        body: { ...subscription(hook.url('/life')), id, status: 'off' },
      });
      expect(off.status, JSON.stringify(off.body)).to.equal(200);
      expect(off.body.status).to.equal('off');
      expect(JSON.stringify(off.body)).to.not.match(/subscription-secret/);
      expect((await fhir(app, 'DELETE', `/Subscription/${id}`)).status).to.equal(204);
      expect((await fhir(app, 'GET', `/Subscription/${id}`)).status).to.equal(404);
    });

    it('notifies in event-number order: id-only carries no content, full-resource the report, a patient filter only that patient, never another tenant; the README snippet verifies the signature and refuses a changed body; $events equals what was delivered', async () => {
      const p1 = await newPatient(app);
      const p2 = await newPatient(app);
      const managedPatient = await newPatient(app, MANAGED);
      const idOnly = await subscribe(
        app,
        subscription(hook.url('/id-only'), {
          filterBy: [{ filterParameter: 'patient', value: `Patient/${p1}` }],
        }),
      );
      const full = await subscribe(
        app,
        subscription(hook.url('/full'), { content: 'full-resource', maxCount: 1 }),
      );
      const managed = await subscribe(app, subscription(hook.url('/managed')), MANAGED);
      const r1 = await submitReport(app, p1, GENERAL, 'first');
      const r2 = await submitReport(app, p2, GENERAL, 'second');
      const r3 = await submitReport(app, managedPatient, MANAGED, 'managed');
      await eventually(
        () =>
          hook.notifications(full.id).length >= 2 &&
          hook.notifications(idOnly.id).length >= 1 &&
          hook.notifications(managed.id).length >= 1,
        'notifications',
      );
      await sleep(300);
      // Patient filter: only p1's report.
      const idOnlyReceived = hook.notifications(idOnly.id);
      expect(idOnlyReceived).to.have.length(1);
      const first = hook.status(idOnlyReceived[0]!);
      expect(first.notificationEvent[0].eventNumber).to.equal('1');
      expect(first.notificationEvent[0].focus.reference).to.match(
        new RegExp(`/QuestionnaireResponse/${r1}/_history/\\d+$`),
      );
      // id-only: entries with fullUrl, no resource content.
      expect(idOnlyReceived[0]!.json.type).to.equal('subscription-notification');
      expect(idOnlyReceived[0]!.json.entry.slice(1).every((e: object) => !('resource' in e))).to.equal(true);
      expect(idOnlyReceived[0]!.body).to.not.contain('first');
      // Full resource, in order, once each.
      const fullReceived = hook.notifications(full.id);
      expect(eventNumbers(fullReceived, hook)).to.deep.equal([1, 2]);
      expect(fullReceived.map((r) => r.json.entry[1].resource.id)).to.deep.equal([r1, r2]);
      expect(fullReceived[1]!.body).to.contain('second');
      // Tenant isolation: the managed subscription sees its own report only, and theirs never its.
      const managedReceived = hook.notifications(managed.id);
      expect(managedReceived).to.have.length(1);
      expect(hook.status(managedReceived[0]!).notificationEvent[0].focus.reference).to.contain(
        `/QuestionnaireResponse/${r3}/`,
      );
      expect(fullReceived.map((r) => r.body).join()).to.not.contain(`/QuestionnaireResponse/${r3}/`);
      // Signature: the README snippet accepts it and refuses a changed body or another secret.
      const verify = readmeVerifier();
      const delivery = fullReceived[0]!;
      const header = String(delivery.headers['x-casebook-signature']);
      expect(header).to.match(/^t=\d+,v1=[0-9a-f]{64}$/);
      expect(verify(header, delivery.body, full.secret)).to.equal(true);
      expect(verify(header, delivery.body.replace('first', 'fixed'), full.secret)).to.equal(false);
      expect(verify(header, delivery.body, idOnly.secret)).to.equal(false);
      // $events replays the same notifications from the log.
      const events = await fhir(
        app,
        'GET',
        `/Subscription/${full.id}/$events?eventsSinceNumber=1&eventsUntilNumber=2`,
      );
      expect(events.status).to.equal(200);
      const replayed = events.body.entry[0].resource;
      expect(replayed.type).to.equal('query-event');
      const delivered = fullReceived.flatMap((r) => hook.status(r).notificationEvent);
      expect(replayed.notificationEvent).to.deep.equal(delivered);
      expect(events.body.entry.slice(1).map((e: { resource: unknown }) => e.resource)).to.deep.equal(
        fullReceived.map((r) => r.json.entry[1].resource),
      );
      const status = await fhir(app, 'GET', `/Subscription/${full.id}/$status`);
      expect(status.status).to.equal(200);
      expect(status.body.entry[0].resource).to.include({
        type: 'query-status',
        status: 'active',
        eventsSinceSubscriptionStart: '2',
      });
      expect(
        (await fhir(app, 'GET', `/Subscription/${full.id}/$events?eventsSinceNumber=x`)).status,
      ).to.equal(400);
    });

    it('a receiver down while 50 reports are submitted gets all 50, in order, each once by event number, soon after it returns; the status goes error and back to active', async () => {
      const downMs = Number(process.env.SUBSCRIPTION_TEST_DOWN_MS ?? 60_000);
      const patient = await newPatient(app);
      const sub = await subscribe(
        app,
        subscription(hook.url('/down'), { filterBy: [{ filterParameter: 'patient', value: patient }] }),
      );
      hook.state.status = 503;
      const downAt = Date.now();
      const ids: string[] = [];
      for (let i = 0; i < 50; i++) ids.push(await submitReport(app, patient, GENERAL, `report ${i}`));
      await eventually(
        async () => (await fhir(app, 'GET', `/Subscription/${sub.id}`)).body.status === 'error',
        'status error while the receiver is down',
      );
      await sleep(Math.max(0, downMs - (Date.now() - downAt)));
      const failed = hook.requests.filter((r) => !r.accepted && r.body.includes(sub.id)).length;
      expect(failed, 'attempts while down').to.be.greaterThan(1);
      hook.state.status = 200;
      const back = Date.now();
      await eventually(
        () => eventNumbers(hook.notifications(sub.id), hook).length >= 50,
        '50 notifications',
        10_000,
      );
      const received = hook.notifications(sub.id);
      expect(Date.now() - back).to.be.below(10_000);
      expect(eventNumbers(received, hook)).to.deep.equal(Array.from({ length: 50 }, (_, i) => i + 1));
      expect(
        received.flatMap((r) =>
          hook
            .status(r)
            .notificationEvent.map((e: { focus: { reference: string } }) =>
              e.focus.reference.split('/').at(-3),
            ),
        ),
      ).to.deep.equal(ids);
      await eventually(
        async () => (await fhir(app, 'GET', `/Subscription/${sub.id}`)).body.status === 'active',
        'active again',
      );
      const metrics = await (await fetch(`${app.baseUrl}/metrics`)).text();
      expect(metrics).to.match(/casebook_subscription_deliveries_total\{outcome="failed"\} [1-9]/);
      expect(metrics).to.match(/casebook_subscription_delivery_lag_seconds_count [1-9]/);
    });
  });
}
