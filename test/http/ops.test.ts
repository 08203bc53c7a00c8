/**
 * Operations (docs/architecture.md "Operations"): /readyz, /metrics, and what a poison event does
 * to the service — an event a projection cannot apply, written straight to the store (issue 10
 * "defence in depth", issue 11 "a projection that fails on an event stops only itself").
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import { type NewEvent, UnstorableEvent } from '../../src/eventstore/port.js';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { testEvent } from '../support/events.js';
import { FHIR_JSON, fhir } from '../support/fhir.js';

for (const database of testDatabases) {
  describe(`operations on ${database.name}`, () => {
    let app: TestApp;
    afterEach(() => app?.close());

    const readyz = async () => {
      const res = await fetch(`${app.baseUrl}/readyz`);
      return { status: res.status, body: (await res.json()) as any };
    };

    const newPatient = async (value = uuid()) => {
      const res = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: 'urn:test:mrn', value }] },
      });
      return res;
    };

    it('is ready with every read model live, and says so on /readyz', async () => {
      app = await startTestApp(database);
      // The deferred AuditEvent view follows the log by itself: a new store's first event
      // (IdentifierHashingChosen, appended at start) may be one it has not read yet.
      expect(await app.casebook.runner.waitForDeferred('audit-events')).to.equal('current');
      const { status, body } = await readyz();
      expect(status).to.equal(200);
      expect(body.status).to.equal('ready');
      expect(body.store).to.include({ ok: true, kind: database.name });
      expect(body.projections.map((p: any) => [p.name, p.status, p.lag])).to.deep.equal([
        ['tenants', 'live', 0],
        ['api_clients', 'live', 0],
        ['sessions', 'live', 0],
        ['resources', 'live', 0],
        ['export-outbox', 'live', 0],
        ['subscriptions', 'live', 0],
        ['audit-events', 'live', 0],
      ]);
    });

    it('counts requests by route pattern and status, and appends, on /metrics', async () => {
      app = await startTestApp(database);
      await seed(app);
      const created = await newPatient();
      expect(created.status).to.equal(201);
      await fhir(app, 'GET', `/Patient/${created.body.id}`);
      await fhir(app, 'GET', '/Patient/999999');
      const res = await fetch(`${app.baseUrl}/metrics`);
      expect(res.status).to.equal(200);
      expect(res.headers.get('content-type')).to.match(/^text\/plain/);
      const text = await res.text();
      expect(text).to.match(
        /casebook_http_requests_total\{method="POST",route="\/fhir\/r5\/:type",status="201"\} 1/,
      );
      expect(text).to.match(
        /casebook_http_requests_total\{method="GET",route="\/fhir\/r5\/:type\/:id",status="200"\} 1/,
      );
      expect(text).to.match(
        /casebook_http_requests_total\{method="GET",route="\/fhir\/r5\/:type\/:id",status="404"\} 1/,
      );
      // Never the raw path: no ids in the labels.
      expect(text).to.not.include(`/Patient/${created.body.id}`);
      // Latency by route and status (issue 11 "Operations"): one GET by id answered 200.
      expect(text).to.match(
        /casebook_http_request_duration_seconds_count\{method="GET",route="\/fhir\/r5\/:type\/:id",status="200"\} 1\n/,
      );
      expect(text).to.match(
        /casebook_http_request_duration_seconds_bucket\{le="\+Inf",method="GET",route="\/fhir\/r5\/:type\/:id",status="200"\} 1\n/,
      );
      expect(text).to.match(/casebook_appends_total \d+/);
      expect(text).to.match(/casebook_projection_status\{projection="resources",status="live"\} 1/);
      expect(text).to.match(/casebook_projection_lag_events\{projection="resources"\} 0/);
    });

    it('answers /metrics only with the token when METRICS_TOKEN is set', async () => {
      app = await startTestApp(database, { env: { METRICS_TOKEN: 'scrape-token-0123456789' } });
      expect((await fetch(`${app.baseUrl}/metrics`)).status).to.equal(401);
      expect(
        (await fetch(`${app.baseUrl}/metrics`, { headers: { Authorization: 'Bearer wrong' } })).status,
      ).to.equal(401);
      const res = await fetch(`${app.baseUrl}/metrics`, {
        headers: { Authorization: 'Bearer scrape-token-0123456789' },
      });
      expect(res.status).to.equal(200);
    });

    const event = (data: unknown): NewEvent => testEvent('PatientRegistered', data);

    it('refuses to store an event whose data holds a NUL, writes nothing and keeps answering', async () => {
      app = await startTestApp(database);
      await seed(app);
      const events = (await app.allEvents()).length;
      let error: unknown;
      await app.casebook.store
        .append(
          'Patient-987653',
          [
            event({
              id: 987_653,
              tenantId: 1,
              resource: { identifier: [{ system: 'urn:x', value: 'a\u0000b' }] },
              at: '2026-03-01T10:00:00.000Z',
            }),
          ],
          'no_stream',
        )
        .catch((e: unknown) => {
          error = e;
        });
      expect(error).to.be.instanceOf(UnstorableEvent);
      expect((await app.allEvents()).length).to.equal(events);
      expect((await readyz()).status).to.equal(200);
      expect((await newPatient()).status).to.equal(201);
    });

    it('keeps answering after an event a projection cannot apply reaches the log: only that read model stops', async () => {
      app = await startTestApp(database);
      await seed(app);
      const before = await newPatient();
      expect(before.status).to.equal(201);

      // A Patient registration without its resource, written past the edge straight into the store
      // (as a buggy writer, another tool, or a KurrentDB client could): the resources projection
      // cannot apply it.
      const poison = event({ id: 987_654, tenantId: 1, resource: null, at: '2026-03-01T10:00:00.000Z' });
      const { position } = await app.casebook.store.append('Patient-987654', [poison], 'no_stream');

      // /readyz names the projection, the event's position and stream, and the error.
      const { status, body } = await readyz();
      expect(status).to.equal(503);
      expect(body.status).to.equal('not ready');
      const resources = body.projections.find((p: any) => p.name === 'resources');
      expect(resources.status).to.equal('stopped');
      expect(resources.failure).to.include({
        stream: 'Patient-987654',
        eventId: poison.id,
        eventType: 'PatientRegistered',
        position: `${position.commit}/${position.prepare}`,
      });
      expect(resources.failure.error).to.be.a('string').and.not.equal('');
      for (const p of body.projections) if (p.name !== 'resources') expect(p.status, p.name).to.equal('live');
      const metrics = await (await fetch(`${app.baseUrl}/metrics`)).text();
      expect(metrics).to.match(/casebook_projection_status\{projection="resources",status="stopped"\} 1/);

      // The writes before it stay readable; /healthz and the other read models keep answering.
      expect((await fhir(app, 'GET', `/Patient/${before.body.id}`)).status).to.equal(200);
      expect((await fetch(`${app.baseUrl}/healthz`)).status).to.equal(200);
      const session = await fetch(`${app.authUrl}/sessions`, {
        method: 'POST',
        headers: { Authorization: GENERAL, 'Content-Type': 'application/json' },
        body: JSON.stringify({
          fhirContext: [
            {
              type: 'Practitioner',
              identifier: { system: 'urn:test:staff', value: 'dr-ops' },
              role: 'https://casebook.example/fhir/role/new',
            },
          ],
        }),
      });
      // A new Practitioner is a resource: the stopped read model refuses it, and nothing is written.
      expect(session.status).to.equal(503);

      // A write the stopped read model would have to show is refused (503), never 2xx-then-invisible.
      const events = (await app.allEvents()).length;
      const refused = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: 'urn:test:mrn', value: uuid() }] },
      });
      expect(refused.status).to.equal(503);
      expect(refused.headers.get('content-type')).to.match(/^application\/fhir\+json/);
      expect(refused.body.issue[0].code).to.equal('transient');
      expect(refused.body.issue[0].diagnostics).to.match(/read model resources is stopped/);
      expect((await app.allEvents()).length).to.equal(events);
      expect(FHIR_JSON).to.equal('application/fhir+json');
    });
  });
}
