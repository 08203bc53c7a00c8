/**
 * The README quick start and walkthrough, end to end with real processes: `npm start` as written
 * (compiling into dist/) on the embedded default, the source on the Postgres server, scripts/walkthrough.sh against it, then the
 * CLI's event export of the session stream.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { PostgresSql } from '../../src/db/sql.js';
import { POSTGRES_TEST_URL } from '../support/databases.js';
import { cli, script, startServer } from '../support/process.js';

interface Leg {
  readonly name: string;
  /** Start the server with the README's own `npm start` (compiled into dist/) instead of the source. */
  readonly npmStart?: boolean;
  setup(): Promise<{ env: Record<string, string>; dispose: () => Promise<void> }>;
}

const legs: Leg[] = [
  {
    name: 'the embedded default (PGlite in DATA_DIR), started with npm start',
    npmStart: true,
    async setup() {
      const dir = mkdtempSync(join(tmpdir(), 'casebook-'));
      return { env: { DATA_DIR: dir }, dispose: async () => rmSync(dir, { recursive: true, force: true }) };
    },
  },
  {
    name: 'the Postgres server (DATABASE_URL)',
    async setup() {
      const schema = `w_${randomBytes(5).toString('hex')}`;
      const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
      await admin.exec(`CREATE SCHEMA ${schema}`);
      await admin.close();
      const url = new URL(POSTGRES_TEST_URL);
      url.searchParams.set('options', `-c search_path=${schema}`);
      return {
        env: { DATABASE_URL: url.toString() },
        dispose: async () => {
          const cleanup = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
          await cleanup.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
          await cleanup.close();
        },
      };
    },
  },
];

for (const leg of legs) {
  describe(`README walkthrough on ${leg.name}`, function () {
    this.timeout(120_000);

    it('runs the session, FHIR and form walkthroughs as written; the event log shows every step', async () => {
      const { env, dispose } = await leg.setup();
      try {
        const server = await startServer(env, { npmStart: leg.npmStart === true });
        let sessionId: string;
        try {
          if (leg.npmStart)
            expect(server.commandLines()).to.include.members(['npm start', 'node dist/cli/main.js serve']);
          const secret = /export CASEBOOK_CLIENT_SECRET=(\S+)/.exec(server.output())?.[1];
          expect(secret, server.output()).to.be.a('string');
          expect(server.output()).to.include('export CASEBOOK_CLIENT_ID=demo-ehr');
          const base = `http://localhost:${server.port}`;
          const out = await script('scripts/walkthrough.sh', {
            CASEBOOK_CLIENT_ID: 'demo-ehr',
            CASEBOOK_CLIENT_SECRET: secret!,
            CASEBOOK_AUTH_URL: `${base}/auth`,
            CASEBOOK_APP_URL: `${base}/app`,
          });
          expect(out).to.match(/"handover_token":"\d+\.[\w-]{43}"/);
          expect(out).to.match(/HTTP\/1\.1 303/);
          expect(out).to.match(
            /set-cookie: auth_session=[\w-]+; Path=\/; Expires=[^;]+; HttpOnly; Secure; SameSite=Strict/i,
          );
          expect(out).to.match(/"active":true/);
          expect(out).to.include('HTTP 204');
          expect(out.match(/HTTP 401/g)).to.have.length(2);
          sessionId = /"id":(\d+)/.exec(out)![1]!;
          const fhir = await script('scripts/fhir-walkthrough.sh', {
            CASEBOOK_CLIENT_ID: 'demo-ehr',
            CASEBOOK_CLIENT_SECRET: secret!,
            CASEBOOK_AUTH_URL: `${base}/auth`,
            CASEBOOK_APP_URL: `${base}/app`,
            CASEBOOK_FHIR_URL: `${base}/fhir/r5`,
          });
          expect(fhir).to.match(/"resourceType":"Patient","id":"\d+","meta":\{"versionId":"1"/);
          expect(fhir).to.match(
            /"meta":\{"versionId":"2".*"identifier":\[\{"system":"urn:demo:mrn","value":"MRN-\d+"\},\{"system":"urn:demo:insurance","value":"INS-77"\}\]/,
          );
          expect(fhir).to.match(/"type":"history","total":2/);
          expect(fhir).to.match(/"code":"duplicate".*\nHTTP 409/s);
          expect(fhir).to.match(/"code":"forbidden".*\nHTTP 403/s);
          const forms = await script('scripts/forms-walkthrough.sh', {
            CASEBOOK_CLIENT_ID: 'demo-ehr',
            CASEBOOK_CLIENT_SECRET: secret!,
            CASEBOOK_FHIR_URL: `${base}/fhir/r5`,
          });
          expect(forms).to.include(
            '{"linkId":"patient.name","text":"Name","answer":[{"valueString":"Ada Lovelace"}]}',
          );
          expect(forms).to.include(
            '{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"required","diagnostics":"\'Impression\' (linkId \\"impression\\") is required but has no answer","expression":["QuestionnaireResponse.item[3]"]}]}',
          );
          expect(forms).to.include('"severity":"information","code":"informational"');
          expect(forms.slice(forms.indexOf('Chest X-ray report\n'))).to.equal(
            [
              'Chest X-ray report',
              '',
              'PATIENT',
              'Name: Ada Lovelace',
              'Date of birth: 1815-12-10',
              '',
              'Clinical indication: Cough and fever for 5 days',
              '',
              'FINDINGS',
              'Lungs: Consolidation',
              'Heart enlarged: No',
              'Other findings:',
              '  Small left pleural effusion.',
              '  No pneumothorax.',
              '',
              'Impression: Right lower lobe pneumonia.',
              '',
            ].join('\n'),
          );
        } finally {
          await server.stop();
          // npm's SIGTERM reached the server (the start script execs node): nothing is left running.
          const left = server.commandLines();
          if (left.length > 0) await server.kill();
          expect(left).to.deep.equal([]);
        }
        const exported = (await cli(['events', 'export', '--stream', `session-${sessionId}`], env))
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line));
        expect(exported.map((e) => e.type)).to.deep.equal([
          'SessionCreated',
          'SessionHandedOver',
          'SessionEnded',
        ]);
        expect(exported.map((e) => e.metadata.actor)).to.deep.equal([
          { type: 'client', id: 'demo-ehr' },
          { type: 'session', id: sessionId },
          { type: 'client', id: 'demo-ehr' },
        ]);
        for (const e of exported) {
          expect(e.metadata.tenantId).to.equal(1);
          expect(e.metadata.correlationId).to.be.a('string').and.not.empty;
          expect(Date.parse(e.metadata.recordedAt)).to.be.a('number').and.not.NaN;
        }
      } finally {
        await dispose();
      }
    });
  });
}
