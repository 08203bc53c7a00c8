/**
 * Signed hospital launches (issue 12; docs/interface.md §4.6): only the hospital's EHR can open a
 * session, for the patient it names. Unsigned, badly signed, tampered, expired, future and
 * replayed links answer 401 and write nothing; a rotated key still verifies; 20 concurrent uses of
 * one link give one session; a launch never moves an Encounter to another patient nor overwrites
 * the Patient's demographics (unless configured). On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { loadConfig } from '../../src/config.js';
import {
  canonicalString,
  MAX_SKEW_SECONDS,
  signCanonical,
  signLaunch,
  verifyLaunch,
} from '../../src/integration/launch-signature.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { TEST_LAUNCH_SECRET } from '../support/launch.js';

const OLD_SECRET = 'old-launch-secret-9876543210-zyxwvutsrqp';
const ENV = {
  LAUNCHER_CLIENT_ID: 'ehr-backend',
  LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
  // Rotation: the new key signs, both verify.
  LAUNCHER_SHARED_SECRET: `${TEST_LAUNCH_SECRET},${OLD_SECRET}`,
};

describe('launch link signatures (pure)', () => {
  it('writes the canonical string sorted by name then value, percent-encoded, without sig', () => {
    expect(
      canonicalString({
        user: 'dr grey',
        patient: 'P-1001',
        sig: 'ignored',
        dob: '1815-12-10',
        encounter: 'E/2001',
        x: ['b', 'a&c'],
      }),
    ).to.equal('dob=1815-12-10&encounter=E%2F2001&patient=P-1001&user=dr%20grey&x=a%26c&x=b');
  });

  // The README's worked example: integrators check their own signing code against it.
  it('signs the README example exactly', () => {
    const query = {
      patient: 'P-1001',
      encounter: 'E-2001',
      user: 'dr-grey',
      dob: '1815-12-10',
      sex: 'F',
      ts: '1767225600',
      nonce: 'n0nce-0123456789abcdef',
    };
    const canonical = canonicalString(query);
    expect(canonical).to.equal(
      'dob=1815-12-10&encounter=E-2001&nonce=n0nce-0123456789abcdef&patient=P-1001&sex=F&ts=1767225600&user=dr-grey',
    );
    expect(signCanonical(canonical, 'example-shared-secret-change-me-0123456789')).to.equal(
      'wQs7XPzv0QMssvaJ-8mRYNjnEgmS_jRcCybBFLeaKiw',
    );
  });

  it('verifies with any configured key and refuses the rest with a reason', () => {
    const now = new Date('2026-03-01T10:00:00.000Z');
    const params = { patient: 'P', encounter: 'E', user: 'U' };
    const signed = Object.fromEntries(signLaunch(params, OLD_SECRET, now, 'nonce-0123456789abcd'));
    expect(verifyLaunch(signed, [TEST_LAUNCH_SECRET, OLD_SECRET], now)).to.deep.equal({
      ok: true,
      nonce: 'nonce-0123456789abcd',
      ts: now.getTime() / 1000,
      key: 1,
    });
    const refused = (query: Record<string, string>, at = now) => {
      const verified = verifyLaunch(query, [TEST_LAUNCH_SECRET], at);
      return verified.ok ? 'ok' : verified.reason;
    };
    expect(refused(params)).to.equal('unsigned');
    expect(refused({ ...signed, nonce: 'short' })).to.equal('malformed');
    expect(refused(signed)).to.equal('bad-signature');
    const good = Object.fromEntries(signLaunch(params, TEST_LAUNCH_SECRET, now));
    expect(refused({ ...good, patient: 'Q' })).to.equal('bad-signature');
    expect(refused(good, new Date(now.getTime() + (MAX_SKEW_SECONDS + 1) * 1000))).to.equal('expired');
    expect(refused(good, new Date(now.getTime() - (MAX_SKEW_SECONDS + 1) * 1000))).to.equal('not-yet-valid');
    expect(refused(good, new Date(now.getTime() + MAX_SKEW_SECONDS * 1000))).to.equal('ok');
  });

  it('accepts unsigned launches only on a loopback address, and refuses weak secrets', () => {
    expect(() => loadConfig({ LAUNCHER_ALLOW_UNSIGNED: 'true' })).to.throw(/loopback/);
    expect(
      loadConfig({ LAUNCHER_ALLOW_UNSIGNED: 'true', HOST: '127.0.0.1' }).launcher.allowUnsigned,
    ).to.equal(true);
    expect(() => loadConfig({ LAUNCHER_SHARED_SECRET: 'too-short' })).to.throw(/shorter than 32/);
  });
});

for (const database of testDatabases) {
  describe(`signed launches on ${database.name}`, function () {
    this.timeout(60_000);
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database, { env: ENV });
      await seed(app);
    });
    after(() => app?.close());

    const urlOf = (query: URLSearchParams | Record<string, string>) =>
      `${app.baseUrl}/launch?${new URLSearchParams(query as Record<string, string>).toString()}`;
    const signed = (
      params: Record<string, string>,
      options: { secret?: string; skewSeconds?: number } = {},
    ) =>
      signLaunch(
        params,
        options.secret ?? TEST_LAUNCH_SECRET,
        new Date(app.casebook.clock().getTime() + (options.skewSeconds ?? 0) * 1000),
      );
    const get = (url: string) => fetch(url, { redirect: 'manual' });
    const eventCount = async () => (await app.allEvents()).length;

    /** Asserts a 401 error page naming `reason`, and that nothing was written. */
    const expectRefused = async (url: string, reason: RegExp) => {
      const before = await eventCount();
      const res = await get(url);
      const html = await res.text();
      expect(res.status, html).to.equal(401);
      expect(res.headers.get('content-type')).to.match(/^text\/html/);
      expect(html).to.include('This launch link cannot be used');
      expect(html).to.match(reason);
      expect(await eventCount()).to.equal(before);
    };

    const params = () => ({ patient: unique('P'), encounter: unique('E'), user: 'dr-sign' });

    it('refuses an unsigned link', async () => {
      await expectRefused(urlOf(params()), /is not signed/);
    });

    it('refuses a link signed with another key', async () => {
      await expectRefused(
        urlOf(signed(params(), { secret: 'an-attackers-secret-0123456789-abcdef' })),
        /bad signature/,
      );
    });

    it('refuses a link whose parameters were changed after signing', async () => {
      const query = signed(params());
      query.set('patient', 'LP-1');
      await expectRefused(urlOf(query), /bad signature/);
    });

    it('refuses a link 301 s old and one dated 301 s in the future', async () => {
      await expectRefused(urlOf(signed(params(), { skewSeconds: -(MAX_SKEW_SECONDS + 1) })), /has expired/);
      await expectRefused(
        urlOf(signed(params(), { skewSeconds: MAX_SKEW_SECONDS + 1 })),
        /dated in the future/,
      );
    });

    it('accepts a link once: the same nonce again is refused', async () => {
      const url = urlOf(signed(params()));
      expect((await get(url)).status).to.equal(303);
      await expectRefused(url, /already used/);
    });

    it('accepts a link signed with the second key of a rotated pair, and records the launch', async () => {
      const before = await eventCount();
      const res = await get(urlOf(signed(params(), { secret: OLD_SECRET })));
      expect(res.status).to.equal(303);
      const launches = (await app.allEvents()).slice(before).filter((e) => e.type === 'LaunchAccepted');
      expect(launches).to.have.length(1);
      expect(launches[0]!.data).to.deep.include({
        signed: true,
        key: 1,
        disagreements: [],
        demographicsUpdated: false,
      });
    });

    it('gives one session for 20 concurrent uses of one link, and 401 to the other 19', async () => {
      const url = urlOf(signed(params()));
      const before = await eventCount();
      const statuses = await Promise.all(Array.from({ length: 20 }, () => get(url).then((r) => r.status)));
      expect(statuses.filter((s) => s === 303)).to.have.length(1);
      expect(statuses.filter((s) => s === 401)).to.have.length(19);
      const written = (await app.allEvents()).slice(before);
      expect(written.filter((e) => e.type === 'SessionCreated')).to.have.length(1);
      expect(written.filter((e) => e.type === 'LaunchAccepted')).to.have.length(1);
    });

    it('refuses (409) a launch whose encounter belongs to another patient, and leaves the Encounter as it was', async () => {
      const first = params();
      expect((await get(urlOf(signed(first)))).status).to.equal(303);
      const { launcher } = app.casebook.config;
      const found = await fhir(
        app,
        'GET',
        `/Encounter?identifier=${encodeURIComponent(`${launcher.encounterSystem}|${first.encounter}`)}`,
      );
      const encounter = found.body.entry[0].resource;
      const before = await eventCount();
      const res = await get(urlOf(signed({ ...first, patient: unique('P-other') })));
      expect(res.status).to.equal(409);
      const html = await res.text();
      expect(html).to.include(`Encounter ${first.encounter} belongs to another patient.`);
      expect(await eventCount()).to.equal(before);
      const after = await fhir(app, 'GET', `/Encounter/${encounter.id}`);
      expect(after.body.meta.versionId).to.equal(encounter.meta.versionId);
      expect(after.body.subject).to.deep.equal(encounter.subject);
    });

    it('keeps the date of birth and sex on record when a launch disagrees, and records the disagreement', async () => {
      const first = { ...params(), dob: '1970-01-01', sex: 'F' };
      expect((await get(urlOf(signed(first)))).status).to.equal(303);
      const before = await eventCount();
      const res = await get(urlOf(signed({ ...first, dob: '2001-02-03', sex: 'M' })));
      expect(res.status).to.equal(303);
      const written = (await app.allEvents()).slice(before);
      expect(written.map((e) => e.type)).to.not.include('PatientUpdated');
      const launch = written.find((e) => e.type === 'LaunchAccepted')!;
      expect(launch.data).to.deep.include({
        disagreements: ['birthDate', 'gender'],
        demographicsUpdated: false,
      });
      const { launcher } = app.casebook.config;
      const patient = await fhir(
        app,
        'GET',
        `/Patient?identifier=${encodeURIComponent(`${launcher.patientSystem}|${first.patient}`)}`,
      );
      expect(patient.body.entry[0].resource).to.deep.include({ birthDate: '1970-01-01', gender: 'female' });
    });
  });
}

describe('launch options', function () {
  this.timeout(60_000);
  const pglite = testDatabases.find((d) => d.name === 'pglite')!;

  it('writes disagreeing demographics when LAUNCHER_UPDATE_DEMOGRAPHICS=true', async () => {
    const app = await startTestApp(pglite, { env: { ...ENV, LAUNCHER_UPDATE_DEMOGRAPHICS: 'true' } });
    try {
      await seed(app);
      const sign = (p: Record<string, string>) =>
        `${app.baseUrl}/launch?${signLaunch(p, TEST_LAUNCH_SECRET, app.casebook.clock()).toString()}`;
      const first = { patient: 'P-demo', encounter: 'E-demo', user: 'dr', dob: '1970-01-01' };
      expect((await fetch(sign(first), { redirect: 'manual' })).status).to.equal(303);
      expect((await fetch(sign({ ...first, dob: '1971-01-01' }), { redirect: 'manual' })).status).to.equal(
        303,
      );
      const launches = (await app.allEvents()).filter((e) => e.type === 'LaunchAccepted');
      expect(launches.at(-1)!.data).to.deep.include({
        disagreements: ['birthDate'],
        demographicsUpdated: true,
      });
      const found = await fhir(
        app,
        'GET',
        `/Patient?identifier=${encodeURIComponent(`${app.casebook.config.launcher.patientSystem}|P-demo`)}`,
      );
      expect(found.body.entry[0].resource.birthDate).to.equal('1971-01-01');
    } finally {
      await app.close();
    }
  });

  it('accepts unsigned links with LAUNCHER_ALLOW_UNSIGNED=true on a loopback address', async () => {
    const app = await startTestApp(pglite, {
      env: {
        LAUNCHER_CLIENT_ID: 'ehr-backend',
        LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
        LAUNCHER_ALLOW_UNSIGNED: 'true',
        HOST: '127.0.0.1',
      },
    });
    try {
      await seed(app);
      const res = await fetch(`${app.baseUrl}/launch?patient=P-u&encounter=E-u&user=dr`, {
        redirect: 'manual',
      });
      expect(res.status).to.equal(303);
      const launch = (await app.allEvents()).find((e) => e.type === 'LaunchAccepted')!;
      expect(launch.data).to.deep.include({ signed: false });
    } finally {
      await app.close();
    }
  });
});
