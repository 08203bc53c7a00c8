/**
 * A notification survives kill -9 (issue 37): a real casebook process on PostgreSQL commits a
 * report and is killed (SIGKILL) at once, while its receiver stalls: before the notification is
 * decided, or while it is being sent. After a restart it is decided from the log and delivered,
 * numbered 1; a request cut off by the crash carried the same number.
 */
import { expect } from 'chai';
import { REPORT_TOPIC_URL } from '../../src/domain/subscription/topics.js';
import {
  eventually,
  type ProcessSchema,
  processSchema,
  type RunningServer,
  startServer,
} from '../support/process.js';
import { receiver } from '../support/subscriptions.js';

const CLIENT = `Basic ${Buffer.from('crash-ehr:crash-secret-0123456789').toString('base64')}`;

describe('a subscription notification across kill -9 (real process, PostgreSQL)', function () {
  this.timeout(120_000);
  let server: RunningServer | undefined;
  let db: ProcessSchema;
  let env: Record<string, string>;
  let hook: Awaited<ReturnType<typeof receiver>>;

  before(async () => {
    hook = await receiver();
    db = await processSchema('ks', {
      tenants: [
        {
          name: 'Crash Hospital',
          allowed_scopes: 'user/*.* patient/*.*',
          subscription_origins: [hook.origin],
          clients: [
            { client_id: 'crash-ehr', client_secret: 'crash-secret-0123456789', scopes: 'system/*.*' },
          ],
        },
      ],
    });
    env = {
      ...db.env,
      SUBSCRIPTION_POLL_MS: '100',
      SUBSCRIPTION_RETRY_BASE_MS: '100',
      SUBSCRIPTION_RETRY_MAX_MS: '500',
    };
  });
  after(async () => {
    await server?.kill();
    hook?.close();
    await db?.dispose();
  });

  it('delivers the notification of a report committed just before the crash, after the restart, once', async () => {
    server = await startServer(env);
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`http://127.0.0.1:${server!.port}/fhir/r5${path}`, {
        method,
        headers: { Authorization: CLIENT, ...(body ? { 'Content-Type': 'application/fhir+json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const json = (await res.json()) as any;
      expect(res.status, JSON.stringify(json)).to.be.within(200, 201);
      return json;
    };
    const patient = await api('POST', '/Patient', { resourceType: 'Patient', name: [{ family: 'Crash' }] });
    const sub = await api('POST', '/Subscription', {
      resourceType: 'Subscription',
      status: 'requested',
      topic: REPORT_TOPIC_URL,
      channelType: { code: 'rest-hook' },
      endpoint: hook.url('/crash'),
      content: 'id-only',
    });
    await eventually(async () => (await api('GET', `/Subscription/${sub.id}`)).status === 'active', 'active');

    // The receiver stalls: a request that reaches it is never answered. The process is killed
    // right after the report's commit — before its notification is decided, or while it is sent.
    hook.state.hang = true;
    const report = await api('POST', '/QuestionnaireResponse', {
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'https://forms.example.org/Questionnaire/crash',
      status: 'completed',
      subject: { reference: `Patient/${patient.id}` },
    });
    await server.kill();
    hook.state.hang = false;
    expect(hook.notifications(sub.id)).to.have.length(0);

    server = await startServer(env);
    await eventually(() => hook.notifications(sub.id).length >= 1, 'the notification after the restart');
    await new Promise((r) => setTimeout(r, 500));
    const received = hook.notifications(sub.id);
    expect(received).to.have.length(1);
    const status = hook.status(received[0]!);
    expect(status.notificationEvent).to.have.length(1);
    expect(status.notificationEvent[0].eventNumber).to.equal('1');
    expect(status.notificationEvent[0].focus.reference).to.contain(`/QuestionnaireResponse/${report.id}/`);
    // A request cut off by the crash carried the same event number: the receiver drops the repeat.
    const sent = hook.requests.filter(
      (r) => hook.status(r).type === 'event-notification' && r.body.includes(`Subscription/${sub.id}`),
    );
    for (const r of sent) expect(hook.status(r).notificationEvent[0].eventNumber).to.equal('1');
  });
});
