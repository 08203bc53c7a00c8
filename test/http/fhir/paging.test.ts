/**
 * Paging of search (issue 13; docs/interface.md §4.4; FHIR R5 http.html#paging, search.html):
 * `_count` (default 20, at most 1,000), keyset `_cursor` links (self, first, previous, next) that
 * never skip or repeat a resource when others are written between pages, `_total`, `_sort`.
 */
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type Credentials, fhir, ROLE_NEW, sessionCookie } from '../../support/fhir.js';

for (const database of testDatabases) {
  describe(`search paging on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    const system = `urn:paging:${database.name}`;
    const created: string[] = [];
    let n = 0;

    const newPatient = async (family = 'Pager') => {
      const res = await fhir(app, 'POST', '/Patient', {
        body: {
          resourceType: 'Patient',
          identifier: [{ system, value: `p-${++n}` }],
          name: [{ family }],
        },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body.id as string;
    };

    /** Follows `next` links from `path`; returns the ids in order and the pages seen. */
    const pages = async (path: string, between?: () => Promise<void>, auth: Credentials = GENERAL) => {
      const ids: string[] = [];
      const bundles: any[] = [];
      let url: string | undefined = path;
      while (url) {
        const res = await fhir(app, 'GET', url, { auth });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        bundles.push(res.body);
        ids.push(...(res.body.entry ?? []).map((e: any) => e.resource.id as string));
        const next = res.body.link.find((l: any) => l.relation === 'next')?.url as string | undefined;
        url = next ? next.slice(next.indexOf('/fhir/r5') + '/fhir/r5'.length) : undefined;
        if (url && between) await between();
      }
      return { ids, bundles };
    };

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      for (let i = 0; i < 45; i++) created.push(await newPatient());
    });
    after(() => app?.close());

    it('pages through 45 Patients with _count=10: each exactly once, with self, first and next links', async () => {
      const all = await pages('/Patient?_count=10');
      const mine = all.ids.filter((id) => created.includes(id));
      expect(mine).to.deep.equal(created);
      expect(new Set(all.ids).size).to.equal(all.ids.length);
      expect(all.bundles.length).to.equal(Math.ceil(all.ids.length / 10));
      for (const b of all.bundles) {
        expect(b.total).to.equal(all.ids.length);
        expect(b.entry.length).to.be.at.most(10);
        const relations = b.link.map((l: any) => l.relation);
        expect(relations).to.include.members(['self', 'first']);
        for (const l of b.link) expect(l.url).not.to.match(/secret|Basic|client/i);
      }
      expect(all.bundles.at(-1).link.map((l: any) => l.relation)).not.to.include('next');
    });

    it('never skips or repeats a resource when others are created between pages', async () => {
      const before = (await pages('/Patient?_count=500')).ids;
      const added: string[] = [];
      const { ids } = await pages('/Patient?_count=7', async () => {
        added.push(await newPatient('Latecomer'));
      });
      for (const id of before)
        expect(
          ids.filter((x) => x === id),
          `Patient/${id}`,
        ).to.have.length(1);
      expect(new Set(ids).size).to.equal(ids.length);
      // Ids grow, and the default order is by id: every one added between pages follows.
      expect(added.every((id) => ids.includes(id))).to.equal(true);
    });

    it('goes back with previous links to exactly the page before', async () => {
      const first = await fhir(app, 'GET', '/Patient?_count=5');
      const nextUrl = first.body.link.find((l: any) => l.relation === 'next').url as string;
      const second = await fhir(app, 'GET', nextUrl.slice(nextUrl.indexOf('/fhir/r5') + 8));
      const previousUrl = second.body.link.find((l: any) => l.relation === 'previous').url as string;
      const back = await fhir(app, 'GET', previousUrl.slice(previousUrl.indexOf('/fhir/r5') + 8));
      expect(back.body.entry.map((e: any) => e.resource.id)).to.deep.equal(
        first.body.entry.map((e: any) => e.resource.id),
      );
      expect(second.body.entry.map((e: any) => e.resource.id)).not.to.include.members(
        first.body.entry.map((e: any) => e.resource.id),
      );
    });

    it('defaults to 20 entries, caps _count at 1,000, and _count=0 gives only the total', async () => {
      const page = await fhir(app, 'GET', '/Patient');
      expect(page.body.entry).to.have.length(20);
      const capped = await fhir(app, 'GET', '/Patient?_count=5000');
      expect(capped.status).to.equal(200);
      expect(capped.body.entry.length).to.equal(capped.body.total);
      const zero = await fhir(app, 'GET', '/Patient?_count=0');
      expect(zero.body).not.to.have.property('entry');
      expect(zero.body.total).to.equal(capped.body.total);
    });

    it('gives total per _total: accurate by default, estimate, none', async () => {
      const accurate = await fhir(app, 'GET', '/Patient?_count=1');
      const estimate = await fhir(app, 'GET', '/Patient?_count=1&_total=estimate');
      const none = await fhir(app, 'GET', '/Patient?_count=1&_total=none');
      expect(accurate.body.total).to.be.greaterThanOrEqual(45);
      expect(estimate.body.total).to.equal(accurate.body.total);
      expect(none.body).not.to.have.property('total');
      expect((await fhir(app, 'GET', '/Patient?_total=all')).status).to.equal(400);
    });

    it('sorts by _lastUpdated and _id, descending with -, and pages in that order', async () => {
      const { ids } = await pages('/Patient?_sort=-_id&_count=13');
      const numeric = ids.map(Number);
      expect(numeric).to.deep.equal([...numeric].sort((a, b) => b - a));
      const byUpdate = await pages('/Patient?_sort=-_lastUpdated&_count=9');
      expect(new Set(byUpdate.ids).size).to.equal(byUpdate.ids.length);
      expect(byUpdate.ids.length).to.equal(ids.length);
      const times = byUpdate.bundles.flatMap((b) =>
        b.entry.map((e: any) => Date.parse(e.resource.meta.lastUpdated)),
      );
      expect(times).to.deep.equal([...times].sort((a, b) => b - a));
    });

    it('answers 400 for an unsupported _sort, a forged _cursor, or a cursor of another order', async () => {
      expect((await fhir(app, 'GET', '/Patient?_sort=gender')).status).to.equal(400);
      expect((await fhir(app, 'GET', '/Patient?_cursor=not-a-cursor')).status).to.equal(400);
      const forged = Buffer.from(JSON.stringify(['n', "x' OR 1=1", 1, ''])).toString('base64url');
      expect((await fhir(app, 'GET', `/Patient?_cursor=${forged}`)).status).to.equal(400);
      const first = await fhir(app, 'GET', '/Patient?_count=2&_sort=_lastUpdated');
      const next = first.body.link.find((l: any) => l.relation === 'next').url as string;
      const cursor = new URL(next).searchParams.get('_cursor')!;
      expect((await fhir(app, 'GET', `/Patient?_count=2&_cursor=${cursor}`)).status).to.equal(400);
      const badTime = Buffer.from(JSON.stringify(['n', 'yesterday', 1, '_lastUpdated'])).toString(
        'base64url',
      );
      expect((await fhir(app, 'GET', `/Patient?_sort=_lastUpdated&_cursor=${badTime}`)).status).to.equal(400);
    });

    it('fills pages and counts the total for a session whose scopes hide most resources', async () => {
      const own = created[3]!;
      const others = created.filter((id) => id !== own).slice(0, 12);
      const encounter = (patient: string) =>
        fhir(app, 'POST', '/Encounter', {
          body: {
            resourceType: 'Encounter',
            status: 'planned',
            subject: { reference: `Patient/${patient}` },
          },
        });
      for (const p of others) expect((await encounter(p)).status).to.equal(201);
      for (let i = 0; i < 5; i++) expect((await encounter(own)).status).to.equal(201);
      const { cookie } = await sessionCookie(app, {
        scope: 'patient/*.rs',
        patient: Number(own),
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:paging:staff', value: `dr-${database.name}` },
            role: ROLE_NEW,
          },
        ],
      });
      const { ids, bundles } = await pages('/Encounter?_count=2', undefined, cookie);
      expect(ids).to.have.length(5);
      expect(bundles.map((b) => b.entry.length)).to.deep.equal([2, 2, 1]);
      for (const b of bundles) expect(b.total).to.equal(5);
      // One page holding every match the scopes let through: the total is what they let through,
      // not every Encounter the search matched (12 more of other patients).
      const whole = await fhir(app, 'GET', '/Encounter?_count=50', { auth: cookie });
      expect(whole.status).to.equal(200);
      expect(whole.body.entry).to.have.length(5);
      expect(whole.body.total).to.equal(5);
      expect(whole.body.link.map((l: { relation: string }) => l.relation)).to.deep.equal(['self', 'first']);
    });
  });
}

for (const database of testDatabases) {
  describe(`history paging and _at on ${database.name}`, function () {
    this.timeout(60_000);
    let app: TestApp;
    const system = `urn:history:${database.name}`;
    let n = 0;
    const link = (bundle: any, relation: string) => {
      const url = bundle.link.find((l: any) => l.relation === relation)?.url as string | undefined;
      return url ? url.slice(url.indexOf('/fhir/r5') + '/fhir/r5'.length) : undefined;
    };
    const put = async (id: string, family: string) => {
      const res = await fhir(app, 'PUT', `/Practitioner/${id}`, {
        body: { resourceType: 'Practitioner', id, name: [{ family }] },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
    };
    const create = async (family: string) => {
      const res = await fhir(app, 'POST', '/Practitioner', {
        body: {
          resourceType: 'Practitioner',
          identifier: [{ system, value: `dr-${++n}` }],
          name: [{ family }],
        },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body.id as string;
    };
    const families = (bundle: any) =>
      (bundle.entry ?? []).map((e: any) => e.resource?.name?.[0]?.family ?? 'deleted');

    before(async () => {
      app = await startTestApp(database, { start: new Date('2026-03-01T10:00:00.000Z') });
      await seed(app);
    });
    after(() => app?.close());

    it('pages an instance history with _count and next links, newest first', async () => {
      const id = await create('V1');
      for (const family of ['V2', 'V3', 'V4', 'V5']) {
        app.advance(1000);
        await put(id, family);
      }
      const seen: string[] = [];
      let path: string | undefined = `/Practitioner/${id}/_history?_count=2`;
      let pages = 0;
      while (path) {
        const res = await fhir(app, 'GET', path);
        expect(res.status).to.equal(200);
        expect(res.body.total).to.equal(5);
        seen.push(...families(res.body));
        path = link(res.body, 'next');
        pages++;
      }
      expect(seen).to.deep.equal(['V5', 'V4', 'V3', 'V2', 'V1']);
      expect(pages).to.equal(3);

      // previous links lead back page by page to the first; the first page has none.
      const first = await fhir(app, 'GET', `/Practitioner/${id}/_history?_count=2`);
      expect(link(first.body, 'previous')).to.equal(undefined);
      const second = await fhir(app, 'GET', link(first.body, 'next')!);
      const third = await fhir(app, 'GET', link(second.body, 'next')!);
      expect(families(third.body)).to.deep.equal(['V1']);
      const back = await fhir(app, 'GET', link(third.body, 'previous')!);
      expect(families(back.body)).to.deep.equal(['V3', 'V2']);
      expect(link(back.body, 'next')).to.equal(link(second.body, 'next'));
      const front = await fhir(app, 'GET', link(back.body, 'previous')!);
      expect(families(front.body)).to.deep.equal(['V5', 'V4']);
      expect(link(front.body, 'previous')).to.equal(undefined);
    });

    it('_at just before and just after an update gives the old and the new version, at instance and type level', async () => {
      app.advance(60_000);
      const id = await create('Before');
      const other = await create('Other');
      const created = Date.parse(app.casebook.clock().toISOString());
      app.advance(60_000);
      await put(id, 'After');
      const updated = created + 60_000;
      const at = (ms: number) => new Date(ms).toISOString();
      const justBefore = await fhir(app, 'GET', `/Practitioner/${id}/_history?_at=${at(updated - 1)}`);
      expect(families(justBefore.body)).to.deep.equal(['Before']);
      expect(justBefore.body.entry[0].response.etag).to.equal('W/"1"');
      const justAfter = await fhir(app, 'GET', `/Practitioner/${id}/_history?_at=${at(updated + 1)}`);
      expect(families(justAfter.body)).to.deep.equal(['After']);
      expect(justAfter.body.entry[0].response.etag).to.equal('W/"2"');
      const beforeCreation = await fhir(app, 'GET', `/Practitioner/${id}/_history?_at=${at(created - 1)}`);
      expect(beforeCreation.body).not.to.have.property('entry');

      // Type level: one entry per resource, the version current then.
      const typeBefore = await fhir(app, 'GET', `/Practitioner/_history?_at=${at(updated - 1)}&_count=1000`);
      const byId = (bundle: any) =>
        Object.fromEntries(bundle.entry.map((e: any) => [e.resource.id, e.resource.name[0].family]));
      expect(byId(typeBefore.body)[id]).to.equal('Before');
      expect(byId(typeBefore.body)[other]).to.equal('Other');
      const ids = typeBefore.body.entry.map((e: any) => e.resource.id);
      expect(new Set(ids).size).to.equal(ids.length);
      const typeAfter = await fhir(app, 'GET', `/Practitioner/_history?_at=${at(updated + 1)}&_count=1000`);
      expect(byId(typeAfter.body)[id]).to.equal('After');
    });

    it('pages the type-level history by resource, each once, and filters with _since', async () => {
      const all: string[] = [];
      let path: string | undefined = '/Practitioner/_history?_count=2';
      while (path) {
        const res = await fhir(app, 'GET', path);
        expect(res.status).to.equal(200);
        const ids = [...new Set((res.body.entry ?? []).map((e: any) => e.fullUrl as string))];
        expect(ids.length).to.be.at.most(2);
        all.push(...(ids as string[]));
        path = link(res.body, 'next');
      }
      expect(new Set(all).size).to.equal(all.length);
      expect(all.length).to.equal(n);

      // Back from the last page by previous links: the same pages in reverse, to the first.
      const back: string[][] = [];
      let last = await fhir(app, 'GET', '/Practitioner/_history?_count=2');
      expect(link(last.body, 'previous')).to.equal(undefined);
      for (let next = link(last.body, 'next'); next; next = link(last.body, 'next'))
        last = await fhir(app, 'GET', next);
      for (let page: any = last.body; page; ) {
        back.unshift([...new Set((page.entry ?? []).map((e: any) => e.fullUrl as string))] as string[]);
        const previous = link(page, 'previous');
        page = previous ? (await fhir(app, 'GET', previous)).body : undefined;
      }
      expect(back.flat()).to.deep.equal(all);
      expect(back.slice(0, -1).every((p) => p.length === 2)).to.equal(true);
      const since = new Date(Date.parse(app.casebook.clock().toISOString()) - 30_000).toISOString();
      const recent = await fhir(app, 'GET', `/Practitioner/_history?_since=${since}&_count=100`);
      expect(families(recent.body)).to.deep.equal(['After']);
    });

    it('answers 400 for a malformed _at, _since with _at, and an unknown parameter', async () => {
      expect((await fhir(app, 'GET', '/Practitioner/_history?_at=yesterday')).status).to.equal(400);
      expect(
        (await fhir(app, 'GET', '/Practitioner/_history?_at=2026-03-01&_since=2026-03-01')).status,
      ).to.equal(400);
      expect((await fhir(app, 'GET', '/Practitioner/_history?family=x')).status).to.equal(400);
      expect((await fhir(app, 'GET', '/Practitioner/_history?_cursor=abc')).status).to.equal(400);
    });
  });
}
