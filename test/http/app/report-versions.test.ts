/**
 * Report versions over HTTP (issue 32; docs/interface.md §1.3 "Report versions"): every save names
 * its `base_version`; a stale one is refused (409) and stores nothing; the JSON contract of the
 * editor's own fetches; a signed-off report is locked; an amendment with a reason makes an
 * `amended` version (reason in the log and the AuditEvent, the redirect sent again); entered in
 * error withdraws it. On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { deleteSession, newPatient, newTask, sessionBody, unique } from '../../app/support.js';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { fhir, sessionCookie } from '../../support/fhir.js';

for (const database of testDatabases) {
  describe(`report versions on ${database.name}`, () => {
    let app: TestApp;
    let questionnaireUrl: string;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      questionnaireUrl = `https://forms.example/${unique('q')}`;
      const created = await fhir(app, 'POST', '/Questionnaire', {
        body: {
          resourceType: 'Questionnaire',
          url: questionnaireUrl,
          version: '1',
          status: 'active',
          item: [
            { linkId: 'indication', text: 'Indication', type: 'string' },
            { linkId: 'impression', text: 'Impression', type: 'string', required: true },
            { linkId: 'referrer', text: 'Referrer', type: 'string' },
            { linkId: 'studied', text: 'Study date', type: 'date' },
            { linkId: 'reported', text: 'Reported at', type: 'dateTime' },
          ],
        },
      });
      expect(created.status).to.equal(201);
    });
    after(() => app?.close());

    /** A report (in-progress response, version 1) and a session on its patient. */
    const report = async () => {
      const patientId = await newPatient(app);
      const qr = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: `${questionnaireUrl}|1`,
          status: 'in-progress',
          subject: { reference: `Patient/${patientId}` },
        },
      });
      expect(qr.status).to.equal(201);
      const task = await newTask(app, patientId, {
        status: 'in-progress',
        focus: { reference: `QuestionnaireResponse/${qr.body.id}` },
      });
      const { cookie, session } = await sessionCookie(
        app,
        sessionBody({ patient: Number(patientId), post_submit_redirect: 'https://ehr.example.org/done' }),
      );
      return { patientId, responseId: String(qr.body.id), taskId: task.id, cookie: cookie.cookie, session };
    };

    const post = (cookie: string, taskId: string, fields: Record<string, string>, json = false) =>
      fetch(`${app.baseUrl}/app/tasks/${taskId}/report`, {
        method: 'POST',
        redirect: 'manual',
        headers: {
          Cookie: cookie,
          'Content-Type': 'application/x-www-form-urlencoded',
          Origin: new URL(app.casebook.config.appUrl).origin,
          ...(json ? { Accept: 'application/json' } : {}),
        },
        body: new URLSearchParams(fields).toString(),
      });

    const page = async (cookie: string, taskId: string, query = '') => {
      const res = await fetch(`${app.baseUrl}/app/tasks/${taskId}/report${query}`, {
        headers: { Cookie: cookie },
      });
      return { status: res.status, html: await res.text() };
    };

    const stored = async (responseId: string) => {
      const res = await fhir(app, 'GET', `/QuestionnaireResponse/${responseId}`);
      expect(res.status).to.equal(200);
      const answers = Object.fromEntries(
        ((res.body.item ?? []) as { linkId: string; answer?: { valueString?: string }[] }[]).map((i) => [
          i.linkId,
          i.answer?.[0]?.valueString,
        ]),
      );
      return { status: res.body.status as string, version: res.body.meta.versionId as string, answers };
    };

    const events = async (responseId: string) =>
      (await app.casebook.store.readStream(`QuestionnaireResponse-${responseId}`)).map((e) => ({
        type: e.type,
        data: e.data as { reason?: string; author?: string; resource: { status: string } },
      }));

    it('puts base_version (the meta.versionId) in the editor form', async () => {
      const r = await report();
      const { html } = await page(r.cookie, r.taskId);
      expect(html).to.match(/<input type="hidden" name="base_version" value="1">/);
    });

    it('refuses a stale save with 409: nothing stored, the newer answers survive, the page keeps the stale answers', async () => {
      const r = await report();
      const a = await post(r.cookie, r.taskId, {
        action: 'save',
        base_version: '1',
        'q:impression': 'No nodule',
        'q:indication': 'Cough',
      });
      expect(a.status).to.equal(303);
      const stale = await post(r.cookie, r.taskId, {
        action: 'save',
        base_version: '1',
        'q:referrer': 'Dr Stale',
      });
      const html = await stale.text();
      expect(stale.status).to.equal(409);
      expect(html).to.contain('This report was changed elsewhere since you opened it');
      expect(html).to.match(/value="Dr Stale"/);
      expect(html).to.contain('Apply my changes to the newer version');
      // Theirs vs. yours: the impression stored elsewhere, and the stale tab's empty one.
      expect(html).to.match(
        /<th scope="row">Impression<\/th><td>No nodule<\/td><td><span class="empty">\(no answer\)<\/span><\/td>/,
      );
      const after = await stored(r.responseId);
      expect(after).to.deep.equal({
        status: 'in-progress',
        version: '2',
        answers: { impression: 'No nodule', indication: 'Cough' },
      });
      expect((await events(r.responseId)).length).to.equal(2);
    });

    it('answers the editor fetch in JSON: {version, savedAt}; stale 409 {conflict, currentVersion, conflictUrl}; 401 problem+json', async () => {
      const r = await report();
      const ok = await post(
        r.cookie,
        r.taskId,
        { action: 'save', base_version: '1', 'q:impression': 'A' },
        true,
      );
      expect(ok.status).to.equal(200);
      const body = (await ok.json()) as { version: string; savedAt: string };
      expect(body.version).to.equal('2');
      expect(new Date(body.savedAt).toISOString()).to.equal(body.savedAt);
      const stale = await post(
        r.cookie,
        r.taskId,
        { action: 'save', base_version: '1', 'q:impression': 'B' },
        true,
      );
      expect(stale.status).to.equal(409);
      expect(stale.headers.get('content-type')).to.match(/^application\/json/);
      const conflict = (await stale.json()) as {
        conflict: boolean;
        currentVersion: string;
        conflictUrl: string;
      };
      expect(conflict.conflict).to.equal(true);
      expect(conflict.currentVersion).to.equal('2');
      expect(conflict.conflictUrl).to.equal(
        `${app.casebook.config.appUrl}/tasks/${r.taskId}/report?base_version=1`,
      );
      const shown = await fetch(conflict.conflictUrl, { headers: { Cookie: r.cookie } });
      const shownHtml = await shown.text();
      expect(shown.status).to.equal(200);
      expect(shownHtml).to.contain('This report was changed elsewhere since you opened it');
      expect((await stored(r.responseId)).answers).to.deep.equal({ impression: 'A' });
      expect(await deleteSession(app, r.session.id)).to.equal(204);
      const ended = await post(
        r.cookie,
        r.taskId,
        { action: 'save', base_version: '2', 'q:impression': 'C' },
        true,
      );
      expect(ended.status).to.equal(401);
      expect(ended.headers.get('content-type')).to.match(/^application\/problem\+json/);
      expect((await stored(r.responseId)).answers).to.deep.equal({ impression: 'A' });
    });

    it('refuses a save without base_version (400) and changes nothing', async () => {
      const r = await report();
      const res = await post(r.cookie, r.taskId, { action: 'save', 'q:impression': 'A' });
      expect(res.status).to.equal(400);
      expect((await stored(r.responseId)).version).to.equal('1');
    });

    it('merges the stale tab onto the newer version: non-colliding changes applied, collisions listed, nothing stored', async () => {
      const r = await report();
      await post(r.cookie, r.taskId, {
        action: 'save',
        base_version: '1',
        'q:impression': 'Theirs',
        'q:indication': 'Cough',
      });
      const merged = await post(r.cookie, r.taskId, {
        action: 'merge',
        base_version: '1',
        'q:referrer': 'Dr Mine',
        'q:indication': 'Fever',
      });
      const html = await merged.text();
      expect(merged.status).to.equal(200);
      expect(html).to.contain('Your changes were applied to version 2');
      expect(html).to.match(/name="base_version" value="2"/);
      expect(html).to.match(/value="Dr Mine"/);
      expect(html).to.match(/value="Theirs"/);
      expect(html).to.match(/value="Cough"/);
      expect(html).to.contain('Changed by both: the stored answer is kept');
      expect(html).to.contain('yours was: Fever');
      expect((await stored(r.responseId)).version).to.equal('2');
    });

    it('locks a submitted report: save and submit refused, the page (and a relaunch) read-only with Amend', async () => {
      const r = await report();
      const submitted = await post(r.cookie, r.taskId, {
        action: 'submit',
        base_version: '1',
        'q:impression': 'Final',
      });
      expect(submitted.status).to.equal(303);
      expect(submitted.headers.get('location')).to.match(/^https:\/\/ehr\.example\.org\/done\?response=/);
      const save = await post(r.cookie, r.taskId, {
        action: 'save',
        base_version: '2',
        'q:impression': 'Changed',
      });
      expect(save.status).to.equal(409);
      expect(await save.text()).to.contain('This report is signed off: it was not changed');
      const again = await post(
        r.cookie,
        r.taskId,
        { action: 'submit', base_version: '2', 'q:impression': 'X' },
        true,
      );
      expect(again.status).to.equal(409);
      expect(((await again.json()) as { code: string }).code).to.equal('ReportLocked');
      expect(await stored(r.responseId)).to.deep.equal({
        status: 'completed',
        version: '2',
        answers: { impression: 'Final' },
      });
      const relaunch = await sessionCookie(app, sessionBody({ patient: Number(r.patientId) }));
      for (const cookie of [r.cookie, relaunch.cookie.cookie]) {
        const { status, html } = await page(cookie, r.taskId);
        expect(status).to.equal(200);
        expect(html).to.contain('Final report');
        expect(html).to.contain('version 2');
        expect(html).not.to.contain('Submit report');
        expect(html).not.to.contain('name="q:impression"');
        expect(html).to.contain('Amend report');
        expect(html).to.match(/<label class="q-label" for="amend-reason">Reason<\/label>/);
      }
    });

    it('shows dates for people and leaves unanswered questions out unless asked', async () => {
      const r = await report();
      await post(r.cookie, r.taskId, {
        action: 'submit',
        base_version: '1',
        'q:impression': 'Fine',
        'q:studied': '2026-11-03',
        // Typed in a browser one hour east of UTC: shown in UTC, saying so (docs/interface.md §4.2).
        'q:reported': '2026-11-27T10:42',
        'cb:tz': '+01:00',
      });
      const { html } = await page(r.cookie, r.taskId);
      expect(html).to.contain('3 Nov 2026');
      expect(html).not.to.contain('>2026-11-03<');
      expect(html).to.match(
        /data-linkid="reported"[\s\S]*?<div class="answer-readonly">27 Nov 2026, 09:42 UTC<\/div>/,
      );
      expect(html).to.match(
        /Final report<\/strong> · version 2 · [^<]+ · <time datetime="[^"]+">\d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} UTC<\/time>/,
      );
      expect(html).to.match(/data-linkid="referrer"[^>]*hidden/);
      expect(html).to.contain('Show unanswered questions');
      const all = await page(r.cookie, r.taskId, '?unanswered=show');
      expect(all.html).not.to.match(/data-linkid="referrer"[^>]*hidden/);
      expect(all.html).to.contain('Hide unanswered questions');
    });

    it('amends with a reason: a new amended version, reason in the log and the AuditEvent, the redirect sent again; the Task stays completed', async () => {
      const r = await report();
      await post(r.cookie, r.taskId, { action: 'submit', base_version: '1', 'q:impression': 'Left lobe' });
      const blank = await post(r.cookie, r.taskId, { action: 'amend', base_version: '2', reason: '  ' });
      expect(blank.status).to.equal(422);
      expect(await blank.text()).to.contain('Give the reason for this change.');
      const opened = await post(r.cookie, r.taskId, {
        action: 'amend',
        base_version: '2',
        reason: 'wrong lobe',
      });
      const html = await opened.text();
      expect(opened.status).to.equal(200);
      expect(html).to.match(/name="amend_reason" value="wrong lobe"/);
      expect(html).to.match(/name="q:impression"[^>]*value="Left lobe"/);
      expect(html).to.contain('Submit amendment');
      expect((await stored(r.responseId)).version).to.equal('2');
      const amended = await post(r.cookie, r.taskId, {
        action: 'submit',
        base_version: '2',
        amend_reason: 'wrong lobe',
        'q:impression': 'Right lobe',
      });
      expect(amended.status).to.equal(303);
      expect(amended.headers.get('location')).to.match(/^https:\/\/ehr\.example\.org\/done\?response=/);
      expect(await stored(r.responseId)).to.deep.equal({
        status: 'amended',
        version: '3',
        answers: { impression: 'Right lobe' },
      });
      const last = (await events(r.responseId)).at(-1)!;
      expect(last.type).to.equal('QuestionnaireResponseAmended');
      expect(last.data.reason).to.equal('wrong lobe');
      expect(last.data.author).to.match(/^Practitioner\/\d+$/);
      const task = await fhir(app, 'GET', `/Task/${r.taskId}`);
      expect(task.body.status).to.equal('completed');
      const audit = await fhir(app, 'GET', `/AuditEvent?entity=QuestionnaireResponse/${r.responseId}`);
      expect(audit.status).to.equal(200);
      const details = (audit.body.entry ?? []).flatMap(
        (e: any) =>
          (e.resource.entity ?? []).flatMap((x: any) => x.detail ?? []) as {
            type: { text: string };
            valueString: string;
          }[],
      );
      expect(details).to.deep.include({ type: { text: 'reason' }, valueString: 'wrong lobe' });
      expect(details).to.deep.include({ type: { text: 'version' }, valueString: '3' });
      const view = await page(r.cookie, r.taskId);
      expect(view.html).to.contain('Amended report');
      expect(view.html).to.contain('Reason: wrong lobe');
    });

    it('marks entered in error with a reason: struck through, read-only, nothing more accepted', async () => {
      const r = await report();
      await post(r.cookie, r.taskId, {
        action: 'submit',
        base_version: '1',
        'q:impression': 'Wrong patient',
      });
      const res = await post(r.cookie, r.taskId, {
        action: 'entered-in-error',
        base_version: '2',
        reason: 'wrong patient',
      });
      expect(res.status).to.equal(303);
      expect((await stored(r.responseId)).status).to.equal('entered-in-error');
      const last = (await events(r.responseId)).at(-1)!;
      expect(last.type).to.equal('QuestionnaireResponseEnteredInError');
      expect(last.data.reason).to.equal('wrong patient');
      const view = await page(r.cookie, r.taskId);
      expect(view.html).to.contain('Entered in error');
      expect(view.html).to.contain('report readonly struck');
      expect(view.html).not.to.contain('Amend report');
      const amend = await post(r.cookie, r.taskId, { action: 'amend', base_version: '3', reason: 'x' });
      expect(amend.status).to.equal(409);
      expect((await stored(r.responseId)).version).to.equal('3');
    });
  });
}
