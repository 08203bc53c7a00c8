/**
 * Report submission is one append (issue 11): the QuestionnaireResponse is completed and the Task
 * completed together. A real casebook process on PostgreSQL is killed (SIGKILL) in the middle of a
 * submission: after it has written the response's event, while it waits to write the Task's (the
 * test holds the Task's next revision in an open transaction). After a restart the report and the
 * Task agree; submitting again completes both.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import { DEMO_QUESTIONNAIRE } from '../../src/commands/seed.js';
import type { PostgresSql } from '../../src/db/sql.js';
import { type ProcessSchema, processSchema, type RunningServer, startServer } from '../support/process.js';

const CLIENT = `Basic ${Buffer.from('crash-ehr:crash-secret-0123456789').toString('base64')}`;

describe('report submission killed halfway (real process, PostgreSQL)', function () {
  this.timeout(120_000);
  let server: RunningServer | undefined;
  let db: ProcessSchema;
  let admin: PostgresSql;
  let schema: string;
  let env: Record<string, string>;

  before(async () => {
    db = await processSchema('k', {
      tenants: [
        {
          name: 'Crash Hospital',
          allowed_scopes: 'user/*.* patient/*.*',
          clients: [
            {
              client_id: 'crash-ehr',
              client_secret: 'crash-secret-0123456789',
              scopes: 'system/*.*',
              projects: ['demo'],
            },
          ],
          questionnaires: [{ project: 'demo', resource: DEMO_QUESTIONNAIRE }],
        },
      ],
    });
    ({ admin, schema, env } = db);
  });
  after(async () => {
    await server?.kill();
    await db?.dispose();
  });

  it('leaves the report and the Task in agreement, and a later submit completes both', async () => {
    server = await startServer(env);
    const base = () => `http://127.0.0.1:${server!.port}`;
    const api = async (method: string, path: string, body?: unknown, type = 'application/fhir+json') => {
      const res = await fetch(`${base()}${path}`, {
        method,
        headers: { Authorization: CLIENT, ...(body ? { 'Content-Type': type } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const json = (await res.json()) as any;
      expect(res.status, JSON.stringify(json)).to.be.within(200, 201);
      return json;
    };
    const patient = await api('POST', '/fhir/r5/Patient', {
      resourceType: 'Patient',
      identifier: [{ system: 'urn:crash:mrn', value: 'C-1' }],
    });
    const task = await api('POST', '/fhir/r5/Task', {
      resourceType: 'Task',
      status: 'draft',
      intent: 'order',
      for: { reference: `Patient/${patient.id}` },
    });
    const session = await api(
      'POST',
      '/auth/sessions',
      {
        scope: 'user/*.* patient/*.*',
        patient: Number(patient.id),
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:crash:staff', value: 'dr-crash' },
            role: 'https://casebook.example/fhir/role/new',
          },
        ],
      },
      'application/json',
    );
    const next = `${base().replace('127.0.0.1', 'localhost')}/app/external/v1?task=Task/${task.id}`;
    const handover = await fetch(
      `${base()}/auth/sessions/$handover?${new URLSearchParams({ token: session.handover_token, next })}`,
      { redirect: 'manual' },
    );
    expect(handover.status).to.equal(303);
    const cookie = /auth_session=[^;]+/.exec(handover.headers.get('set-cookie') ?? '')![0];
    const app = (path: string, form: Record<string, string>) =>
      fetch(`${base()}/app${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: {
          Cookie: cookie,
          'Content-Type': 'application/x-www-form-urlencoded',
          // The app's own origin (its public URL is on localhost, on the port of the running server).
          Origin: base().replace('127.0.0.1', 'localhost'),
        },
        body: new URLSearchParams(form).toString(),
      });
    // Form selection: the demo Questionnaire starts the report (the Task goes in-progress).
    const [questionnaire] = await admin.query<{ id: number }>(
      `SELECT id FROM ${schema}.rm_resources WHERE resource_type = 'Questionnaire'`,
    );
    expect(
      (await app(`/tasks/${task.id}/forms`, { questionnaire: String(questionnaire!.id) })).status,
    ).to.equal(303);
    const stateOf = async () => {
      const rows = await admin.query<{ resource_type: string; status: string; version_id: number }>(
        `SELECT resource_type, content->>'status' AS status, version_id FROM ${schema}.rm_resources
          WHERE (resource_type = 'Task' AND id = $1) OR resource_type = 'QuestionnaireResponse'`,
        [Number(task.id)],
      );
      return Object.fromEntries(rows.map((r) => [r.resource_type, [r.status, Number(r.version_id)]]));
    };
    expect(await stateOf()).to.deep.equal({
      Task: ['in-progress', 2],
      QuestionnaireResponse: ['in-progress', 1],
    });
    const logged = async () =>
      Number((await admin.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${schema}.es_events`))[0]!.n);
    const eventsBefore = await logged();

    // Hold the Task's next revision: the submission writes the response's event, then waits here.
    const blocker = await admin.pool.connect();
    await blocker.query('BEGIN');
    await blocker.query(
      `INSERT INTO ${schema}.es_events (event_id, stream_name, revision, type, data, metadata)
       VALUES ($1, $2, 2, 'Blocker', '{}', '{}')`,
      [uuid(), `Task-${task.id}`],
    );
    const form = {
      action: 'submit',
      // The version the clinician's page was based on (issue 32): the response's first.
      base_version: '1',
      'cb:tz': 'Z',
      'q:indication': 'Cough',
      'q:findings.lungs': 'clear',
      'q:impression': 'No consolidation',
    };
    const submitting = app(`/tasks/${task.id}/report`, form).catch(() => undefined);
    // Wait until the server's append is blocked on the Task's row, with the response's event written.
    const deadline = Date.now() + 20_000;
    for (;;) {
      const [waiting] = await admin.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%es_append%'`,
      );
      if (Number(waiting!.n) > 0) break;
      if (Date.now() > deadline)
        throw new Error(`the submission never reached the append: ${server.output()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await server.kill();
    await submitting;
    await blocker.query('ROLLBACK');
    blocker.release();

    // Nothing of the submission was written: the report and the Task still agree.
    expect(await logged()).to.equal(eventsBefore);
    server = await startServer(env);
    expect(await stateOf()).to.deep.equal({
      Task: ['in-progress', 2],
      QuestionnaireResponse: ['in-progress', 1],
    });

    // The clinician submits again (same cookie: sessions live in the log): both complete in one append.
    const again = await app(`/tasks/${task.id}/report`, form);
    // No post_submit_redirect on this session: the app says so itself.
    expect(again.status).to.equal(200);
    expect(await again.text()).to.include('<h1>Report submitted</h1>');
    expect(await stateOf()).to.deep.equal({
      Task: ['completed', 3],
      QuestionnaireResponse: ['completed', 2],
    });
    const [submitted] = await admin.query<{ commits: string }>(
      `SELECT count(DISTINCT transaction_id)::text AS commits FROM ${schema}.es_events
        WHERE (stream_name = $1 AND revision = 2) OR (stream_name LIKE 'QuestionnaireResponse-%' AND revision = 1)`,
      [`Task-${task.id}`],
    );
    expect(submitted!.commits, 'the response and the Task in one transaction').to.equal('1');
  });
});
