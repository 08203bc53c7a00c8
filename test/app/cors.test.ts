/**
 * A FHIR web app on another origin (issue 13 "Browser clients are blocked by CORS"): in real
 * Chromium, a page served on another port calls the data server with credentials, If-Match,
 * Prefer and If-None-Exist, and reads the ETag back.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { freePort } from '../support/process.js';
import { chromiumMissing, launchBrowser } from './support.js';

const pglite = testDatabases.find((d) => d.name === 'pglite')!;

describe('a FHIR web app on another origin, in Chromium', function () {
  this.timeout(60_000);
  let app: TestApp;
  let page: Server;
  let browser: Browser;
  let origin: string;

  before(async function () {
    if (chromiumMissing()) {
      console.log('    (skipped: /usr/bin/chromium is not installed)');
      this.skip();
    }
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    app = await startTestApp(pglite, { env: { CORS_ORIGINS: origin } });
    await seed(app);
    page = createServer((_req, res) => {
      res.setHeader('Content-Type', 'text/html; charset=utf-8');
      res.end('<!doctype html><title>EHR web app</title><p>web app</p>');
    });
    page.listen(port, '127.0.0.1');
    await once(page, 'listening');
    expect((page.address() as AddressInfo).port).to.equal(port);
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    page?.close();
    await app?.close();
  });

  it('creates with If-None-Exist, updates with If-Match and Prefer, and reads the ETag', async () => {
    const tab = await browser.newPage();
    await tab.goto(`${origin}/`);
    const base = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
    const result = await tab.evaluate(
      async ({ base, auth }) => {
        const headers = { Authorization: auth, 'Content-Type': 'application/fhir+json' };
        const created = await fetch(`${base}/Practitioner`, {
          method: 'POST',
          credentials: 'include',
          headers: {
            ...headers,
            'If-None-Exist': 'identifier=urn:cors|dr-1',
            Prefer: 'return=representation',
          },
          body: JSON.stringify({
            resourceType: 'Practitioner',
            identifier: [{ system: 'urn:cors', value: 'dr-1' }],
            name: [{ family: 'Cross' }],
          }),
        });
        const body = (await created.json()) as { id: string };
        const etag = created.headers.get('ETag');
        const updated = await fetch(`${base}/Practitioner/${body.id}`, {
          method: 'PUT',
          credentials: 'include',
          headers: {
            ...headers,
            'If-Match': etag ?? '',
            Prefer: 'return=representation',
            'X-Medplum': 'extended',
          },
          body: JSON.stringify({ resourceType: 'Practitioner', id: body.id, name: [{ family: 'Origin' }] }),
        });
        const stale = await fetch(`${base}/Practitioner/${body.id}`, {
          method: 'PUT',
          credentials: 'include',
          headers: { ...headers, 'If-Match': etag ?? '' },
          body: JSON.stringify({ resourceType: 'Practitioner', id: body.id, name: [{ family: 'Late' }] }),
        });
        return {
          created: created.status,
          etag,
          location: created.headers.get('Location'),
          updated: updated.status,
          updatedEtag: updated.headers.get('ETag'),
          stale: stale.status,
        };
      },
      { base, auth: GENERAL },
    );
    expect(result.created).to.equal(201);
    expect(result.etag).to.equal('W/"1"');
    expect(result.location).to.match(/\/Practitioner\/\d+\/_history\/1$/);
    expect(result.updated).to.equal(200);
    expect(result.updatedEtag).to.equal('W/"2"');
    expect(result.stale).to.equal(412);
  });
});
