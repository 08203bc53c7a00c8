/**
 * The `casebook` CLI as an operator runs it (issue 2 §3–4): tenants and clients with JSON output,
 * an idempotent seed file, replay with progress, events export. Real processes on the Postgres
 * server (the embedded default is covered by the README walkthrough test).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { pino } from 'pino';
import { openCasebook } from '../../src/casebook.js';
import { execute } from '../../src/commands/handler.js';
import { createResource } from '../../src/commands/resources.js';
import { loadConfig } from '../../src/config.js';
import { PostgresSql } from '../../src/db/sql.js';
import type { AuditRecord } from '../../src/domain/audit/audit.js';
import { DEFINITIONS } from '../../src/fhir/definitions.js';
import { MAX_SKEW_SECONDS, verifyLaunch } from '../../src/integration/launch-signature.js';
import { allProjections } from '../../src/projections/index.js';
import { POSTGRES_TEST_URL } from '../support/databases.js';
import { TEST_LAUNCH_SECRET } from '../support/launch.js';
import { cli } from '../support/process.js';

describe('casebook CLI on the Postgres server', function () {
  this.timeout(120_000);
  const schema = `c_${randomBytes(5).toString('hex')}`;
  const url = new URL(POSTGRES_TEST_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const env = { DATABASE_URL: url.toString() };
  const dir = mkdtempSync(join(tmpdir(), 'casebook-cli-'));

  before(async () => {
    const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
    await admin.exec(`CREATE SCHEMA ${schema}`);
    await admin.close();
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
    await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.close();
  });

  const exportAll = async () =>
    (await cli(['events', 'export'], env))
      .trim()
      .split('\n')
      .filter(Boolean)
      .map(
        (l) =>
          JSON.parse(l) as {
            type: string;
            stream: string;
            metadata: { actor: { type: string; id: string } };
          },
      );

  it('creates a tenant and a client and prints them as JSON', async () => {
    const tenant = JSON.parse(
      await cli(
        [
          'tenants',
          'create',
          '--name',
          'Cli Hospital',
          '--allowed-scopes',
          'user/*.read',
          '--redirect-origin',
          'https://ehr.cli.example',
        ],
        env,
      ),
    );
    expect(tenant).to.deep.equal({
      id: 1,
      name: 'Cli Hospital',
      ehr_managed: false,
      allowed_scopes: ['user/*.read'],
      redirect_origins: ['https://ehr.cli.example'],
    });
    const client = JSON.parse(
      await cli(
        ['clients', 'create', '--tenant', '1', '--client-id', 'cli-ehr', '--project', 'radiology'],
        env,
      ),
    );
    expect(client.client_id).to.equal('cli-ehr');
    expect(client.client_secret).to.match(/^[\w-]{43}$/);
    expect(client.projects).to.deep.equal(['radiology']);
    const listed = JSON.parse(await cli(['clients', 'list'], env));
    expect(listed.map((c: { client_id: string }) => c.client_id)).to.deep.equal(['cli-ehr']);
    expect(JSON.stringify(listed)).not.to.include(client.client_secret);
    const events = await exportAll();
    expect(events.map((e) => e.type)).to.deep.equal([
      // A new store chooses keyed names for identifier reservations first (docs/architecture.md "Erasure").
      'IdentifierHashingChosen',
      'ReservationClaimed',
      'TenantCreated',
      'ApiClientRegistered',
    ]);
    expect(events[3]!.metadata.actor.id).to.match(/^cli:/);
    expect(JSON.stringify(events)).not.to.include(client.client_secret);
  });

  it('refuses a duplicate tenant name and a weak secret with a message and exit code 1', async () => {
    const duplicate = await cli(['tenants', 'create', '--name', 'cli hospital'], env).then(
      () => 'succeeded',
      (error: { code: number; stderr: string }) => `${error.code}: ${error.stderr}`,
    );
    expect(duplicate).to.match(/^1: .*tenant named "cli hospital" exists/);
    const weak = await cli(
      ['clients', 'create', '--tenant', '1', '--client-id', 'weak', '--secret', 'short'],
      env,
    ).then(
      () => 'succeeded',
      (error: { code: number; stderr: string }) => `${error.code}: ${error.stderr}`,
    );
    expect(weak).to.match(/^1: .*at least 16 characters/);
  });

  it('applies a seed file idempotently', async () => {
    const file = join(dir, 'seed.json');
    writeFileSync(
      file,
      JSON.stringify({
        tenants: [
          {
            name: 'Seeded Hospital',
            allowed_scopes: 'patient/*.* user/*.*',
            clients: [
              {
                client_id: 'seeded-ehr',
                client_secret: 's3cret-at-least-16',
                scopes: 'system/*.*',
                projects: ['radiology'],
              },
            ],
            questionnaires: [
              {
                project: 'radiology',
                resource: {
                  resourceType: 'Questionnaire',
                  url: 'https://forms.example/ct',
                  version: '1',
                  status: 'active',
                  item: [{ linkId: 'finding', text: 'Finding', type: 'string' }],
                },
              },
            ],
          },
        ],
      }),
    );
    const first = JSON.parse(await cli(['seed', file], env));
    expect(first).to.deep.equal({
      tenants: [{ name: 'Seeded Hospital', id: 2, created: true }],
      clients: [{ clientId: 'seeded-ehr', created: true }],
      questionnaires: [
        { id: 1, url: 'https://forms.example/ct', version: '1', project: 'radiology', outcome: 'created' },
      ],
    });
    const before = (await exportAll()).length;
    const second = JSON.parse(await cli(['seed', file], env));
    expect(second).to.deep.equal({
      tenants: [{ name: 'Seeded Hospital', id: 2, created: false }],
      clients: [{ clientId: 'seeded-ehr', created: false }],
      questionnaires: [
        { id: 1, url: 'https://forms.example/ct', version: '1', project: 'radiology', outcome: 'unchanged' },
      ],
    });
    expect((await exportAll()).length).to.equal(before);
  });

  it('erases a patient with a reason: the AuditEvent says who and why, and erasing again adds nothing', async () => {
    const casebook = await openCasebook(loadConfig({ ...process.env, DATABASE_URL: env.DATABASE_URL }), {
      logger: pino({ level: 'silent' }),
    });
    let patient: number;
    try {
      const ctx = casebook.context({ tenantId: 2, actor: { type: 'system', id: 'test' } });
      ({ result: patient } = await execute(
        ctx,
        async (uow) =>
          (await createResource(uow, DEFINITIONS.Patient, 2, { name: [{ family: 'Cli-Erased' }] })).id,
      ));
    } finally {
      await casebook.close();
    }
    const args = ['erase', '--tenant', '2', '--patient', String(patient), '--reason', 'duplicate record'];
    expect(JSON.parse(await cli(args, env))).to.deep.include({
      erased: `Patient/${patient}`,
      already: false,
      resources: [`Patient/${patient}`],
    });
    expect(JSON.parse(await cli(args, env))).to.deep.include({ already: true, resources: [] });

    const log = (await exportAll()) as unknown as {
      type: string;
      position: string;
      data: { reason?: string; records?: AuditRecord[] };
    }[];
    const erased = log.filter((e) => e.type === 'PatientErased');
    expect(erased.map((e) => e.data.reason)).to.deep.equal(['duplicate record']);
    const records = log
      .filter(
        (e) =>
          e.type === 'AuditEventsRecorded' && e.position.split('/')[0] === erased[0]!.position.split('/')[0],
      )
      .flatMap((e) => e.data.records ?? []);
    expect(records).to.have.length(1);
    expect(records[0]).to.deep.include({ tenantId: 2, interaction: 'operation', action: 'D', status: 200 });
    expect(records[0]!.agent).to.deep.equal({
      kind: 'system',
      name: `cli:${process.env.USER ?? 'operator'}`,
    });
    expect(records[0]!.entities).to.deep.equal([
      { reference: `Patient/${patient}`, patientId: patient, reason: 'duplicate record' },
    ]);
  });

  it('replays the log into identical read models', async () => {
    const snapshot = async () => {
      const sql = new PostgresSql(env.DATABASE_URL, { max: 1 });
      try {
        return JSON.stringify([
          await sql.query(`SELECT * FROM rm_tenants ORDER BY id`),
          await sql.query(
            `SELECT client_id, tenant_id, scopes, projects FROM rm_api_clients ORDER BY client_id`,
          ),
        ]);
      } finally {
        await sql.close();
      }
    };
    const before = await snapshot();
    const out = await cli(['replay'], env);
    const result = JSON.parse(out.slice(out.indexOf('{')));
    const log = await exportAll();
    expect(result.replayed).to.equal(log.length);
    // Read: every event some read model handles, and of the others at most what came before the
    // rebuild knew their types (docs/architecture.md "Rebuild").
    const handled = log.filter((e) => allProjections.some((p) => p.handles(e.type))).length;
    expect(handled).to.be.below(log.length); // the log holds identifier reservations
    expect(result.read).to.be.at.least(handled).and.below(log.length);
    expect(await snapshot()).to.equal(before);
  });
});

// Issue 12: the helper integrators and the demo sign launch links with.
describe('casebook launch-url', function () {
  this.timeout(60_000);
  const SECOND_SECRET = 'second-launch-secret-0123456789-abcdefgh';
  const OTHER_SECRET = 'another-launch-secret-0123456789-abcdefg';
  const LAUNCH_URL = 'https://casebook.example.org/launch';

  it('prints a launch URL signed now with the first LAUNCHER_SHARED_SECRET, which the verifier accepts', async () => {
    const out = await cli(['launch-url', '--patient', 'P-1', '--encounter', 'E-1', '--user', 'dr-x'], {
      LAUNCHER_SHARED_SECRET: `${TEST_LAUNCH_SECRET},${SECOND_SECRET}`,
      PUBLIC_LAUNCH_URL: LAUNCH_URL,
    });
    const lines = out.trim().split('\n');
    expect(lines, out).to.have.length(1);
    const url = new URL(lines[0]!);
    expect(`${url.origin}${url.pathname}`).to.equal(LAUNCH_URL);
    const query = Object.fromEntries(url.searchParams);
    expect([...url.searchParams.keys()].sort()).to.deep.equal([
      'encounter',
      'nonce',
      'patient',
      'sig',
      'ts',
      'user',
    ]);
    expect(query).to.include({ patient: 'P-1', encounter: 'E-1', user: 'dr-x' });
    expect(query.ts).to.match(/^\d+$/);
    expect(Math.abs(Number(query.ts) - Date.now() / 1000)).to.be.at.most(MAX_SKEW_SECONDS);
    expect(query.nonce).to.match(/^[A-Za-z0-9_-]{16,}$/);
    expect(query.sig).to.match(/^[A-Za-z0-9_-]{43}$/);
    const now = new Date();
    expect(verifyLaunch(query, [TEST_LAUNCH_SECRET], now)).to.deep.equal({
      ok: true,
      nonce: query.nonce,
      ts: Number(query.ts),
      key: 0,
    });
    // Signed with the first secret only: another secret, or the second of the list, refuses it.
    expect(verifyLaunch(query, [OTHER_SECRET], now)).to.deep.equal({ ok: false, reason: 'bad-signature' });
    expect(verifyLaunch(query, [SECOND_SECRET], now)).to.deep.equal({ ok: false, reason: 'bad-signature' });
    // Each run signs with a fresh nonce.
    const again = new URL(
      (
        await cli(['launch-url', '--patient', 'P-1', '--encounter', 'E-1', '--user', 'dr-x'], {
          LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
        })
      ).trim(),
    );
    expect(again.searchParams.get('nonce')).not.to.equal(query.nonce);
  });

  it('without LAUNCHER_SHARED_SECRET exits 1 with a one-line message and no stack trace', async () => {
    const failed = await cli(['launch-url', '--patient', 'P-1', '--encounter', 'E-1', '--user', 'dr-x'], {
      LAUNCHER_SHARED_SECRET: '',
    }).then(
      (stdout) => ({ code: 0, stdout, stderr: '' }),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    expect(failed.code).to.equal(1);
    expect(failed.stdout).to.equal('');
    expect(failed.stderr).to.equal(
      'casebook: LAUNCHER_SHARED_SECRET is not set: nothing to sign the launch URL with\n',
    );
  });
});
