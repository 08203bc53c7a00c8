/**
 * A launched session is a clinician's (issue 33 finding 8; docs/interface.md §4.6): it asks for
 * LAUNCHER_SCOPES (default `user/*.cruds patient/*.cruds`), downscoped to the tenant's allowed
 * scopes like any POST /sessions — never the tenant's `system/` scopes, even on an EHR-managed
 * tenant that allows `system/*`.
 */
import { expect } from 'chai';
import { DEFAULT_LAUNCHER_SCOPES, loadConfig } from '../../src/config.js';
import { seed, startTestApp, type TestApp, unique } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { launchThrough, TEST_LAUNCH_SECRET } from '../support/launch.js';

/** `GET {auth_url}/sessions/current` with the cookie: the session's `fhir_server.scope`. */
const currentScopes = async (app: TestApp, cookie: string): Promise<string[]> => {
  const res = await fetch(`${app.authUrl}/sessions/current`, { headers: { Cookie: cookie } });
  const body = (await res.json()) as { fhir_server: { scope: string[] } };
  expect(res.status, JSON.stringify(body)).to.equal(200);
  return body.fhir_server.scope;
};

const launcherEnv = (clientId: string, secret: string, extra: Record<string, string> = {}) => ({
  LAUNCHER_CLIENT_ID: clientId,
  LAUNCHER_CLIENT_SECRET: secret,
  LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
  ...extra,
});

for (const database of testDatabases) {
  describe(`launched sessions get the launcher's scopes on ${database.name} (issue 33 finding 8)`, function () {
    this.timeout(60_000);
    const apps: TestApp[] = [];
    after(async () => {
      for (const app of apps) await app.close();
    });
    const start = async (env: Record<string, string>) => {
      const app = await startTestApp(database, { env });
      apps.push(app);
      await seed(app);
      return app;
    };
    const launch = (app: TestApp) =>
      launchThrough(app, { patient: unique('P'), encounter: unique('E'), user: unique('dr') });

    it('holds no system/ scope on an EHR-managed tenant that allows system/*', async () => {
      const app = await start(launcherEnv('managed-ehr', 'managed-secret-0123456789'));
      const { cookie } = await launch(app);
      const scopes = await currentScopes(app, cookie);
      expect(scopes.length).to.be.greaterThan(0);
      for (const scope of scopes) expect(scope).to.match(/^(user|patient)\//);
      // The EHR-managed rules (docs/interface.md §5.3 rule 2) still apply to what is left.
      expect(scopes).to.include('user/QuestionnaireResponse.cruds');
      expect(scopes).to.include('patient/QuestionnaireResponse.cruds');
      expect(scopes).not.to.include('system/QuestionnaireResponse.cruds');
    });

    it('narrows to LAUNCHER_SCOPES on a tenant that allows more', async () => {
      const app = await start(
        launcherEnv('ehr-backend', 'general-secret-0123456789', {
          LAUNCHER_SCOPES: 'patient/QuestionnaireResponse.rs patient/Patient.r',
        }),
      );
      const { cookie } = await launch(app);
      expect(await currentScopes(app, cookie)).to.deep.equal([
        'patient/Patient.r',
        'patient/QuestionnaireResponse.rs',
      ]);
    });
  });
}

describe('LAUNCHER_SCOPES configuration', () => {
  it("defaults to a clinician's user/ and patient/ scopes", () => {
    expect(DEFAULT_LAUNCHER_SCOPES).to.equal('user/*.cruds patient/*.cruds');
    expect(loadConfig({}).launcher.scopes).to.deep.equal(['user/*.cruds', 'patient/*.cruds']);
    expect(loadConfig({ LAUNCHER_SCOPES: 'user/*.* patient/Patient.read' }).launcher.scopes).to.deep.equal([
      'user/*.cruds',
      'patient/Patient.rs',
    ]);
  });

  it('refuses system/ scopes, malformed scopes and none at all', () => {
    for (const [value, message] of [
      ['system/*.cruds', /system\/ scope/],
      ['user/*.cruds system/QuestionnaireResponse.rs', /system\/ scope/],
      ['user/*.x', /LAUNCHER_SCOPES/],
      ['openid launch', /at least one resource scope/],
    ] as const)
      expect(() => loadConfig({ LAUNCHER_SCOPES: value }), value).to.throw(message);
  });
});
