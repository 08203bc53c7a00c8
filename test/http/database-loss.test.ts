/**
 * Database loss is 503 with Retry-After, never 500 (issue 33 finding 6; docs/interface.md §7), in
 * each host's format: an OperationOutcome on the data server, problem+json on the session
 * interface, an HTML page on the app host.
 * - PostgreSQL: a request waits on a read model locked by the test, its backend is terminated
 *   (`pg_terminate_backend`) while it waits, the request's statement fails with 57P01.
 * - PGlite (one in-process connection): the database is closed under the running server.
 */
import { expect } from 'chai';
import { PostgresSql } from '../../src/db/sql.js';
import { newPatient, newTask, sessionBody } from '../app/support.js';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { POSTGRES_TEST_URL, testDatabases } from '../support/databases.js';
import { sessionCookie } from '../support/fhir.js';

/** What each host answers a lost database with. */
const expectUnavailable = async (res: Response, host: 'fhir' | 'auth' | 'app', what: string) => {
  const text = await res.text();
  expect(res.status, `${what}: ${text.slice(0, 300)}`).to.equal(503);
  expect(res.headers.get('retry-after'), `${what}: Retry-After`).to.match(/^\d+$/);
  const type = res.headers.get('content-type') ?? '';
  if (host === 'fhir') {
    expect(type, what).to.match(/^application\/fhir\+json/);
    const outcome = JSON.parse(text);
    expect(outcome.resourceType).to.equal('OperationOutcome');
    expect(outcome.issue[0].code).to.equal('transient');
  } else if (host === 'auth') {
    expect(type, what).to.match(/^application\/problem\+json/);
    expect(JSON.parse(text).status).to.equal(503);
  } else {
    expect(type, what).to.match(/^text\/html/);
    expect(text).to.include('not available right now');
  }
  expect(text).not.to.match(/internal error/);
};

const [pglite, postgres] = testDatabases;

describe('a lost database answers 503 with Retry-After (issue 33)', function () {
  this.timeout(60_000);

  describe('on postgres: the backend of a waiting request is terminated', () => {
    let app: TestApp;
    let admin: PostgresSql;
    let patientId: string;
    let sessionId: number;
    let taskId: string;
    let cookie: string;
    before(async () => {
      app = await startTestApp(postgres!);
      await seed(app);
      patientId = await newPatient(app);
      taskId = (await newTask(app, patientId, { status: 'in-progress' })).id;
      const opened = await sessionCookie(app, sessionBody({ patient: Number(patientId) }));
      cookie = opened.cookie.cookie;
      sessionId = opened.session.id;
      admin = new PostgresSql(POSTGRES_TEST_URL, {
        searchPath: (app.casebook.sql as PostgresSql).target.searchPath!,
        max: 2,
      });
    });
    after(async () => {
      await admin?.close();
      await app?.close();
    });

    /**
     * Sends `request` while `table` is locked, terminates the backends of this schema that wait on
     * the lock, and returns the answer.
     */
    const whileTerminated = (table: string, request: () => Promise<Response>) =>
      admin.transaction(async (tx) => {
        await tx.exec(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`);
        const answer = request();
        let terminated = 0;
        for (let i = 0; i < 200 && terminated === 0; i++) {
          await new Promise((resolve) => setTimeout(resolve, 25));
          const rows = await admin.query<{ ok: boolean }>(
            `SELECT pg_terminate_backend(l.pid) AS ok FROM pg_locks l
               JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.relation = $1::regclass AND NOT l.granted AND a.query NOT ILIKE 'ANALYZE%'`,
            [table],
          );
          terminated = rows.filter((r) => r.ok).length;
        }
        expect(terminated, `a request waiting on ${table}`).to.be.greaterThan(0);
        return answer;
      });

    it('the data server: an OperationOutcome, issue code transient', async () => {
      const base = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
      const res = await whileTerminated('rm_resources', () =>
        fetch(`${base}/Patient/${patientId}`, { headers: { Authorization: GENERAL } }),
      );
      await expectUnavailable(res, 'fhir', 'GET /Patient');
      // The next request gets a new connection.
      const again = await fetch(`${base}/Patient/${patientId}`, { headers: { Authorization: GENERAL } });
      expect(again.status).to.equal(200);
    });

    it('the session interface: problem+json', async () => {
      const res = await whileTerminated('rm_sessions', () =>
        fetch(`${app.authUrl}/sessions/${sessionId}`, { headers: { Authorization: GENERAL } }),
      );
      await expectUnavailable(res, 'auth', 'GET /sessions/{id}');
    });

    it('the app host: an HTML page', async () => {
      const base = app.casebook.config.appUrl.replace('localhost', '127.0.0.1');
      const res = await whileTerminated('rm_resources', () =>
        fetch(`${base}/tasks/${taskId}/forms`, { headers: { Cookie: cookie } }),
      );
      await expectUnavailable(res, 'app', 'GET /app/tasks/{id}/forms');
    });
  });

  describe('on pglite: the database is closed under the server', () => {
    it('answers every host 503 with Retry-After, the audit record failing too', async () => {
      const app = await startTestApp(pglite!);
      try {
        await seed(app);
        const patientId = await newPatient(app);
        const taskId = (await newTask(app, patientId, { status: 'in-progress' })).id;
        const { cookie, session } = await sessionCookie(app, sessionBody({ patient: Number(patientId) }));
        await app.casebook.sql.close();
        const fhirBase = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
        const appBase = app.casebook.config.appUrl.replace('localhost', '127.0.0.1');
        await expectUnavailable(
          await fetch(`${fhirBase}/Patient/${patientId}`, { headers: { Authorization: GENERAL } }),
          'fhir',
          'GET /Patient',
        );
        await expectUnavailable(
          await fetch(`${fhirBase}/Patient`, {
            method: 'POST',
            headers: { Authorization: GENERAL, 'Content-Type': 'application/fhir+json' },
            body: JSON.stringify({
              resourceType: 'Patient',
              identifier: [{ system: 'urn:x', value: 'lost' }],
            }),
          }),
          'fhir',
          'POST /Patient',
        );
        await expectUnavailable(
          await fetch(`${app.authUrl}/sessions/${session.id}`, { headers: { Authorization: GENERAL } }),
          'auth',
          'GET /sessions/{id}',
        );
        await expectUnavailable(
          await fetch(`${appBase}/tasks/${taskId}/forms`, { headers: { Cookie: cookie.cookie } }),
          'app',
          'GET /app/tasks/{id}/forms',
        );
      } finally {
        await app.close().catch(() => undefined);
      }
    });
  });
});
