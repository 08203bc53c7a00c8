/**
 * Every route of the data server, the form backend, the application host and the launcher, walked
 * with a session of another patient (issue 33 "Scopes on every path to a resource";
 * docs/architecture.md "Security"). The routes are read from the routers themselves: a route
 * this walk has no probes for fails it, so a new route is walked from the day it is added.
 *
 * A P1 session asks for P2's Patient, Encounter, Task and reports, their history and versions, a
 * report moved from P2 to P1, searches by P2's identifiers with every `_total`, `$everything`,
 * `$populate` with P2 as context, P1 Tasks that point at P2's report and Encounter, and the app
 * host's task pages. A probe expects one of:
 * - `refused`: 403 or 404 (405, 409 or the launcher's 401 where the route says so) — not a
 *   redirect, not a page with the data left out;
 * - `like`: exactly the answer to the same request with a value nothing holds (a search by P2's
 *   MRN answers as a search by an unknown one: status, total, entries, links);
 * - `shows`: an answer about the caller's own input or shared definitions (metadata, type-level
 *   history, `$validate`…), whatever its status below 500.
 * Every answer is checked: no P2 identifier value, name or answer text in its body or headers, no
 * header naming a P2 resource, and the whole walk writes no event but its AuditEvents.
 * On PGlite and PostgreSQL.
 */
import type Router from '@koa/router';
import { expect } from 'chai';
import { appRouter } from '../../src/http/app/router.js';
import { fhirRouter } from '../../src/http/fhir/router.js';
import { launchRouter } from '../../src/http/launch/router.js';
import { SDC_OPERATIONS } from '../../src/http/sdc/operations.js';
import { sdcRouter } from '../../src/http/sdc/router.js';
import { seed, startTestApp, type TestApp, unique } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import {
  appUrlOf,
  ENCOUNTER_SYSTEM,
  givenTwoPatients,
  leakedIn,
  MRN_SYSTEM,
  p1Session,
  SESSION_SCOPES,
  TASK_SYSTEM,
  type TwoPatients,
} from '../support/isolation.js';
import { TEST_LAUNCH_SECRET } from '../support/launch.js';

type Host = 'fhir' | 'sdc' | 'app' | 'launch';

interface Request {
  readonly method: string;
  /** Absolute URL. */
  readonly url: string;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

type Expectation =
  | { readonly refused: readonly number[] }
  | { readonly like: Request; readonly known: string; readonly unknown: string }
  | 'shows';

interface Probe extends Request {
  readonly label: string;
  readonly expect: Expectation;
}

/** Every `METHOD path` a router serves (HEAD goes with GET), keyed `host METHOD path`. */
const routesOf = (host: Host, router: Router): string[] =>
  router.stack.flatMap((layer) =>
    layer.methods.filter((m) => m !== 'HEAD').map((method) => `${host} ${method} ${layer.path}`),
  );

const REFUSED = { refused: [403, 404] } as const;

for (const database of testDatabases) {
  describe(`every route, walked by a session of another patient, on ${database.name}`, function () {
    this.timeout(300_000);
    let app: TestApp;
    let given: TwoPatients;

    before(async () => {
      app = await startTestApp(database, {
        env: {
          LAUNCHER_CLIENT_ID: 'ehr-backend',
          LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
          LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
        },
      });
      await seed(app);
      given = await givenTwoPatients(app);
    });
    after(() => app?.close());

    const bases = (): Record<Host, string> => {
      const local = (url: string) => url.replace('//localhost:', '//127.0.0.1:').replace(/\/+$/, '');
      const config = app.casebook.config;
      return {
        fhir: local(config.fhirUrl),
        sdc: local(config.sdcUrl),
        app: appUrlOf(app).url,
        launch: local(config.launchUrl),
      };
    };

    /** The probes of every route, for a session whose cookie is `cookie`. */
    const probesFor = (cookie: string): Record<string, Probe[]> => {
      const base = bases();
      const p2 = given.p2;
      const fhirJson = {
        Cookie: cookie,
        'Content-Type': 'application/fhir+json',
        Accept: 'application/fhir+json',
      };
      const get = (host: Host, path: string, expect: Expectation, label = path): Probe => ({
        label,
        method: 'GET',
        url: `${base[host]}${path}`,
        headers: { Cookie: cookie },
        expect,
      });
      const send = (
        method: string,
        host: Host,
        path: string,
        body: unknown,
        expect: Expectation,
        extra = {},
      ) => ({
        label: `${method} ${path} ${JSON.stringify(body).slice(0, 80)}`,
        method,
        url: `${base[host]}${path}`,
        headers: { ...fhirJson, ...extra },
        body: JSON.stringify(body),
        expect,
      });
      const form = (path: string, fields: Record<string, string>, expect: Expectation = REFUSED): Probe => ({
        label: `POST ${path} ${JSON.stringify(fields)}`,
        method: 'POST',
        url: `${base.app}${path}`,
        headers: {
          Cookie: cookie,
          'Content-Type': 'application/x-www-form-urlencoded',
          Origin: appUrlOf(app).origin,
        },
        body: new URLSearchParams(fields).toString(),
        expect,
      });
      /** A search by `known` (a P2 value) answered like one by `unknown`, with each `_total`. */
      const searches = (type: string, known: string, unknown: string): Probe[] =>
        ['accurate', 'estimate', 'none'].map((total) => {
          const at = (q: string) =>
            `${base.fhir}/${type}?${new URLSearchParams(q).toString()}&_total=${total}`;
          return {
            label: `GET /${type}?${known}&_total=${total}`,
            method: 'GET',
            url: at(known),
            headers: { Cookie: cookie },
            expect: {
              like: { method: 'GET', url: at(unknown), headers: { Cookie: cookie } },
              known,
              unknown,
            },
          };
        });
      const postSearch = (type: string, known: string, unknown: string): Probe => {
        const request = (q: string): Request => ({
          method: 'POST',
          url: `${base.fhir}/${type}/_search`,
          headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded' },
          body: `${new URLSearchParams(q).toString()}&_total=estimate`,
        });
        return {
          label: `POST /${type}/_search ${known}`,
          ...request(known),
          expect: { like: request(unknown), known, unknown },
        };
      };
      const mrn = (value: string) => `identifier=${MRN_SYSTEM}|${value}`;
      const nobody = unique('nobody');
      const absent = '2147483000';
      const p2Resources = [
        ['Patient', p2.patient],
        ['Encounter', p2.encounter],
        ['Task', p2.task],
        ['QuestionnaireResponse', p2.response],
      ] as const;
      const moved = `QuestionnaireResponse/${given.moved.response}`;
      const crossingTasks = [
        given.crossing.focus,
        given.crossing.output,
        given.crossing.absoluteOutput,
        given.crossing.encounter,
      ];
      const p1Task = (extra: Record<string, unknown>) => ({
        resourceType: 'Task',
        identifier: [{ system: TASK_SYSTEM, value: unique('walk') }],
        status: 'ready',
        intent: 'order',
        for: { reference: `Patient/${given.p1.patient}` },
        ...extra,
      });
      const r2 = { reference: `QuestionnaireResponse/${p2.response}` };
      const populate = (context: [string, string][]) => ({
        resourceType: 'Parameters',
        parameter: context.map(([name, reference]) => ({
          name: 'context',
          part: [
            { name: 'name', valueString: name },
            { name: 'content', valueReference: { reference } },
          ],
        })),
      });
      const inline = {
        name: 'questionnaire',
        resource: {
          resourceType: 'Questionnaire',
          url: 'https://forms.example.org/Questionnaire/walk',
          status: 'active',
          item: [{ linkId: 'findings', type: 'string' }],
        },
      };
      const aboutP2 = {
        resourceType: 'QuestionnaireResponse',
        questionnaire: given.questionnaireUrl,
        status: 'completed',
        subject: { reference: `Patient/${p2.patient}` },
        encounter: { reference: `Encounter/${p2.encounter}` },
        item: [{ linkId: 'findings', answer: [{ valueString: 'the caller’s own words' }] }],
      };
      const transaction = (entry: unknown) => ({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [entry],
      });
      const patientWithP2Mrn = {
        resourceType: 'Patient',
        identifier: [{ system: MRN_SYSTEM, value: p2.mrn }],
      };

      return {
        'fhir GET /metadata': [get('fhir', '/metadata', 'shows')],
        'fhir POST /': [
          send(
            'POST',
            'fhir',
            '',
            transaction({ resource: patientWithP2Mrn, request: { method: 'POST', url: 'Patient' } }),
            { refused: [409] },
          ),
          send(
            'POST',
            'fhir',
            '',
            transaction({
              resource: { resourceType: 'Patient', name: [{ family: 'Walk' }] },
              request: { method: 'POST', url: 'Patient', ifNoneExist: mrn(p2.mrn) },
            }),
            REFUSED,
          ),
          send(
            'POST',
            'fhir',
            '',
            transaction({
              resource: { resourceType: 'Patient' },
              request: { method: 'PUT', url: `Patient?${mrn(p2.mrn)}` },
            }),
            REFUSED,
          ),
          ...p2Resources.map(([type, id]) =>
            send(
              'POST',
              'fhir',
              '',
              transaction({ request: { method: 'DELETE', url: `${type}/${id}` } }),
              REFUSED,
            ),
          ),
          send(
            'POST',
            'fhir',
            '',
            transaction({ resource: p1Task({ focus: r2 }), request: { method: 'POST', url: 'Task' } }),
            REFUSED,
          ),
        ],
        'fhir GET /AuditEvent': [get('fhir', `/AuditEvent?patient=Patient/${p2.patient}`, REFUSED)],
        'fhir GET /AuditEvent/:id': [get('fhir', '/AuditEvent/1', REFUSED)],
        'fhir POST /AuditEvent': [
          send('POST', 'fhir', '/AuditEvent', { resourceType: 'AuditEvent' }, { refused: [405] }),
        ],
        'fhir PUT /AuditEvent/:id': [
          send('PUT', 'fhir', '/AuditEvent/1', { resourceType: 'AuditEvent' }, { refused: [405] }),
        ],
        'fhir DELETE /AuditEvent/:id': [
          { ...get('fhir', '/AuditEvent/1', { refused: [405] }), method: 'DELETE' },
        ],
        'fhir GET /Patient/:id/$everything': [get('fhir', `/Patient/${p2.patient}/$everything`, REFUSED)],
        // A session never erases (system/Patient.d only): refused, and P2 stays readable to P2's owner.
        'fhir POST /Patient/:id/$erase': [
          send(
            'POST',
            'fhir',
            `/Patient/${p2.patient}/$erase`,
            { resourceType: 'Parameters', parameter: [{ name: 'reason', valueString: 'walk' }] },
            REFUSED,
          ),
        ],
        'fhir GET /:type': [
          ...searches('Patient', mrn(p2.mrn), mrn(nobody)),
          ...searches('Patient', `_id=${p2.patient}`, `_id=${absent}`),
          ...searches(
            'Encounter',
            `identifier=${ENCOUNTER_SYSTEM}|${p2.encounterIdentifier}`,
            `identifier=${ENCOUNTER_SYSTEM}|${nobody}`,
          ),
          ...searches('Encounter', `patient=Patient/${p2.patient}`, `patient=Patient/${absent}`),
          ...searches(
            'Task',
            `identifier=${TASK_SYSTEM}|${p2.taskIdentifier}`,
            `identifier=${TASK_SYSTEM}|${nobody}`,
          ),
          ...searches('Task', `patient=Patient/${p2.patient}`, `patient=Patient/${absent}`),
          ...searches('QuestionnaireResponse', `patient=Patient/${p2.patient}`, `patient=Patient/${absent}`),
          ...searches('QuestionnaireResponse', `_id=${p2.response}`, `_id=${absent}`),
          // P1's report made during P2's Encounter is P1's: found, and nothing of P2 with it.
          get('fhir', `/QuestionnaireResponse?encounter=Encounter/${p2.encounter}`, 'shows'),
          get(
            'fhir',
            `/QuestionnaireResponse?patient=Patient/${given.p1.patient}&_include=QuestionnaireResponse:encounter&_include=QuestionnaireResponse:subject`,
            'shows',
          ),
          get('fhir', '/Task?_count=1000', 'shows'),
          get('fhir', '/Practitioner?_count=1000', 'shows'),
          get('fhir', '/Questionnaire?_count=1000', 'shows'),
          get('fhir', '/ValueSet?_count=1000', 'shows'),
        ],
        'fhir POST /:type/_search': [
          postSearch('Patient', mrn(p2.mrn), mrn(nobody)),
          postSearch('Task', `patient=Patient/${p2.patient}`, `patient=Patient/${absent}`),
        ],
        'fhir GET /:type/_history': [
          'Patient',
          'Encounter',
          'Task',
          'QuestionnaireResponse',
          'Practitioner',
        ].flatMap((type) => [
          get('fhir', `/${type}/_history?_count=1000`, 'shows'),
          get(
            'fhir',
            `/${type}/_history?_count=1000&_at=${encodeURIComponent(given.moved.firstVersionAt)}`,
            'shows',
          ),
        ]),
        'fhir POST /:type': [
          send('POST', 'fhir', '/Patient', patientWithP2Mrn, { refused: [409] }),
          send('POST', 'fhir', '/Patient', { resourceType: 'Patient' }, REFUSED, {
            'If-None-Exist': mrn(p2.mrn),
          }),
          send(
            'POST',
            'fhir',
            '/Encounter',
            {
              resourceType: 'Encounter',
              status: 'planned',
              identifier: [{ system: ENCOUNTER_SYSTEM, value: p2.encounterIdentifier }],
              subject: { reference: `Patient/${given.p1.patient}` },
            },
            { refused: [403, 409] },
          ),
          send(
            'POST',
            'fhir',
            '/Task',
            p1Task({ identifier: [{ system: TASK_SYSTEM, value: p2.taskIdentifier }] }),
            {
              refused: [403, 409],
            },
          ),
          send('POST', 'fhir', '/Task', p1Task({ focus: r2 }), REFUSED),
          send(
            'POST',
            'fhir',
            '/Task',
            p1Task({ output: [{ type: { text: 'questionnaire-response' }, valueReference: r2 }] }),
            REFUSED,
          ),
          send(
            'POST',
            'fhir',
            '/Task',
            p1Task({ encounter: { reference: `Encounter/${p2.encounter}` } }),
            REFUSED,
          ),
        ],
        'fhir PUT /:type': [
          send('PUT', 'fhir', `/Patient?${mrn(p2.mrn)}`, { resourceType: 'Patient' }, REFUSED),
          send(
            'PUT',
            'fhir',
            `/Encounter?identifier=${ENCOUNTER_SYSTEM}|${p2.encounterIdentifier}`,
            { resourceType: 'Encounter', status: 'completed' },
            REFUSED,
          ),
          send('PUT', 'fhir', `/Task?identifier=${TASK_SYSTEM}|${p2.taskIdentifier}`, p1Task({}), REFUSED),
        ],
        'fhir GET /:type/:id': [
          ...p2Resources.map(([type, id]) => get('fhir', `/${type}/${id}`, REFUSED)),
          get('fhir', `/${moved}`, 'shows'),
        ],
        // Valid bodies: an invalid one is refused (422) before its target is looked at.
        'fhir PUT /:type/:id': [
          send(
            'PUT',
            'fhir',
            `/Patient/${p2.patient}`,
            { resourceType: 'Patient', id: String(p2.patient) },
            REFUSED,
          ),
          send(
            'PUT',
            'fhir',
            `/Encounter/${p2.encounter}`,
            { resourceType: 'Encounter', id: String(p2.encounter), status: 'completed' },
            REFUSED,
          ),
          send('PUT', 'fhir', `/Task/${p2.task}`, { ...p1Task({}), id: String(p2.task) }, REFUSED),
          send(
            'PUT',
            'fhir',
            `/QuestionnaireResponse/${p2.response}`,
            { ...aboutP2, subject: { reference: `Patient/${given.p1.patient}` }, id: String(p2.response) },
            REFUSED,
          ),
        ],
        'fhir DELETE /:type/:id': p2Resources.map(([type, id]) => ({
          ...get('fhir', `/${type}/${id}`, REFUSED),
          method: 'DELETE',
        })),
        'fhir GET /:type/:id/_history': [
          ...p2Resources.map(([type, id]) => get('fhir', `/${type}/${id}/_history`, REFUSED)),
          get('fhir', `/${moved}/_history`, 'shows'),
          get('fhir', `/${moved}/_history?_at=${encodeURIComponent(given.moved.firstVersionAt)}`, 'shows'),
        ],
        'fhir GET /:type/:id/_history/:vid': [
          ...p2Resources.map(([type, id]) => get('fhir', `/${type}/${id}/_history/1`, REFUSED)),
          get('fhir', `/${moved}/_history/1`, REFUSED),
        ],
        'sdc POST /Questionnaire/$populate': [
          [['patient', `Patient/${p2.patient}`]],
          [['subject', `Patient/${p2.patient}`]],
          [['encounter', `Encounter/${p2.encounter}`]],
          [['clinical', `QuestionnaireResponse/${p2.response}`]],
          [
            ['clinical', `Task/${given.crossing.focus}`],
            ['patient', `Patient/${p2.patient}`],
          ],
        ].map((context) => {
          const body = populate(context as [string, string][]);
          return send(
            'POST',
            'sdc',
            '/Questionnaire/$populate',
            { ...body, parameter: [inline, ...body.parameter] },
            REFUSED,
          );
        }),
        'sdc POST /Questionnaire/:id/$populate': [
          send(
            'POST',
            'sdc',
            `/Questionnaire/${given.questionnaire}/$populate`,
            populate([['patient', `Patient/${p2.patient}`]]),
            REFUSED,
          ),
        ],
        // $assemble reads Questionnaires only: whatever it answers, it shows nothing of P2.
        'sdc POST /Questionnaire/$assemble': [
          send(
            'POST',
            'sdc',
            '/Questionnaire/$assemble',
            {
              resourceType: 'Parameters',
              parameter: [
                {
                  name: 'questionnaire',
                  valueReference: { reference: `QuestionnaireResponse/${p2.response}` },
                },
              ],
            },
            'shows',
          ),
        ],
        'sdc POST /Questionnaire/:id/$assemble': [
          send(
            'POST',
            'sdc',
            `/Questionnaire/${given.questionnaire}/$assemble`,
            { resourceType: 'Parameters' },
            'shows',
          ),
        ],
        'sdc GET /Questionnaire/:id/$assemble': [
          get('sdc', `/Questionnaire/${given.questionnaire}/$assemble`, 'shows'),
        ],
        'sdc POST /QuestionnaireResponse/$validate': [
          send('POST', 'sdc', '/QuestionnaireResponse/$validate', aboutP2, 'shows'),
        ],
        'sdc POST /QuestionnaireResponse/$generate-narrative': [
          send('POST', 'sdc', '/QuestionnaireResponse/$generate-narrative', aboutP2, 'shows'),
        ],
        'sdc POST /QuestionnaireResponse/$extract': [
          send('POST', 'sdc', '/QuestionnaireResponse/$extract', aboutP2, 'shows'),
        ],
        'sdc GET /ValueSet/$expand': [
          get('sdc', '/ValueSet/$expand?url=https://forms.example.org/ValueSet/none', 'shows'),
        ],
        'sdc POST /ValueSet/$expand': [
          send(
            'POST',
            'sdc',
            '/ValueSet/$expand',
            { resourceType: 'Parameters', parameter: [{ name: 'url', valueUri: 'urn:none' }] },
            'shows',
          ),
        ],
        'sdc GET /ValueSet/:id/$expand': [get('sdc', `/ValueSet/${given.valueSet}/$expand`, 'shows')],
        'sdc POST /ValueSet/:id/$expand': [
          send('POST', 'sdc', `/ValueSet/${given.valueSet}/$expand`, { resourceType: 'Parameters' }, 'shows'),
        ],
        'app GET /external/v1': [
          ...[p2.task, p2.draftTask, ...crossingTasks].map((task) =>
            get('app', `/external/v1?task=Task/${task}`, REFUSED),
          ),
          get('app', `/external/v1?task=Task/${p2.task}&readonly=yes`, REFUSED),
          {
            ...get(
              'app',
              `/external/v1?${new URLSearchParams({ 'task:identifier': `${TASK_SYSTEM}|${p2.taskIdentifier}` })}`,
              REFUSED,
            ),
            expect: {
              like: get(
                'app',
                `/external/v1?${new URLSearchParams({ 'task:identifier': `${TASK_SYSTEM}|${nobody}` })}`,
                REFUSED,
              ),
              known: p2.taskIdentifier,
              unknown: nobody,
            },
          },
        ],
        // Topics are casebook's own definitions, no patient data; Subscriptions are for API
        // clients with system/Subscription scopes (issue 37): a session gets 403 on every one,
        // a filter on P2 included.
        'fhir GET /SubscriptionTopic': [get('fhir', '/SubscriptionTopic', 'shows')],
        'fhir GET /SubscriptionTopic/:id': [get('fhir', '/SubscriptionTopic/report-status', 'shows')],
        'fhir POST /Subscription': [
          send(
            'POST',
            'fhir',
            '/Subscription',
            {
              resourceType: 'Subscription',
              status: 'requested',
              topic: 'urn:casebook:topic:unknown',
              filterBy: [{ filterParameter: 'patient', value: `Patient/${p2.patient}` }],
              channelType: { code: 'rest-hook' },
              endpoint: 'https://receiver.example/hook',
              content: 'full-resource',
            },
            REFUSED,
          ),
        ],
        'fhir GET /Subscription': [get('fhir', '/Subscription', REFUSED)],
        'fhir GET /Subscription/:id': [get('fhir', '/Subscription/1', REFUSED)],
        'fhir PUT /Subscription/:id': [
          send('PUT', 'fhir', '/Subscription/1', { resourceType: 'Subscription', id: '1' }, REFUSED),
        ],
        'fhir DELETE /Subscription/:id': [send('DELETE', 'fhir', '/Subscription/1', {}, REFUSED)],
        'fhir GET /Subscription/:id/$status': [get('fhir', '/Subscription/1/$status', REFUSED)],
        'fhir POST /Subscription/:id/$status': [
          send('POST', 'fhir', '/Subscription/1/$status', { resourceType: 'Parameters' }, REFUSED),
        ],
        'fhir GET /Subscription/:id/$events': [get('fhir', '/Subscription/1/$events', REFUSED)],
        'fhir POST /Subscription/:id/$events': [
          send('POST', 'fhir', '/Subscription/1/$events', { resourceType: 'Parameters' }, REFUSED),
        ],
        // Static browser code without data: an unknown name (here P2's Task id) is a 404.
        'app GET /assets/:name': [get('app', `/assets/${p2.task}.js`, REFUSED)],
        'app GET /tasks/:id/forms': [p2.task, p2.draftTask, ...crossingTasks].map((task) =>
          get('app', `/tasks/${task}/forms`, REFUSED),
        ),
        'app POST /tasks/:id/forms': [p2.draftTask, given.crossing.encounter, given.crossing.focus].map(
          (task) => form(`/tasks/${task}/forms`, { questionnaire: String(given.questionnaire) }),
        ),
        'app GET /tasks/:id/report': [p2.task, ...crossingTasks].flatMap((task) => [
          get('app', `/tasks/${task}/report`, REFUSED),
          get('app', `/tasks/${task}/report?readonly=yes`, REFUSED),
          get('app', `/tasks/${task}/report?viewMode=standalone`, REFUSED),
        ]),
        'app POST /tasks/:id/report': [p2.task, ...crossingTasks].flatMap((task) =>
          ['save', 'submit', 'cancel'].map((action) =>
            form(`/tasks/${task}/report`, { action, 'q:findings': 'Overwritten' }),
          ),
        ),
        // The launcher takes only links the EHR signed; a session cookie opens nothing there.
        'launch GET /': [
          get('launch', `/?patient=${p2.mrn}&encounter=${p2.encounterIdentifier}&user=walker`, {
            refused: [401],
          }),
        ],
        'launch GET /submitted': [
          get(
            'launch',
            `/submitted?response=QuestionnaireResponse/${p2.response}&task=Task/${p2.task}`,
            REFUSED,
          ),
        ],
      };
    };

    /** The answer to `request`, its text and its headers as text. */
    const answer = async (request: Request) => {
      const res = await fetch(request.url, {
        method: request.method,
        redirect: 'manual',
        ...(request.headers ? { headers: request.headers } : {}),
        ...(request.body !== undefined ? { body: request.body } : {}),
      });
      const body = await res.text();
      return { status: res.status, body, headers: [...res.headers] };
    };

    /** The text of `body` with each of `values` (raw and as a query string encodes it) replaced. */
    const normalised = (body: string, values: readonly string[]) =>
      values.reduce(
        (text, value) =>
          text
            .replaceAll(new URLSearchParams(value).toString(), '«value»')
            .replaceAll(encodeURIComponent(value), '«value»')
            .replaceAll(value, '«value»'),
        body,
      );

    it('has probes for every route of the four routers, and none for a route that is gone', () => {
      const routes = [
        ...routesOf('fhir', fhirRouter(app.casebook)),
        ...routesOf('sdc', sdcRouter(app.casebook, SDC_OPERATIONS)),
        ...routesOf('app', appRouter(app.casebook)),
        ...routesOf('launch', launchRouter(app.casebook)),
      ];
      expect(routes.length).to.be.greaterThan(30);
      const probed = Object.keys(probesFor('auth_session=x'));
      expect(
        routes.filter((r) => !probed.includes(r)),
        'routes without probes: add them to this walk',
      ).to.deep.equal([]);
      expect(
        probed.filter((p) => !routes.includes(p)),
        'probes of routes that no longer exist',
      ).to.deep.equal([]);
    });

    for (const scope of SESSION_SCOPES)
      it(`answers a P1 session with ${scope} 403/404, or as for an unknown value, and never with P2's data`, async () => {
        const cookie = await p1Session(app, given, scope);
        const eventsBefore = (await app.allEvents()).length;
        const p2References = [
          `Patient/${given.p2.patient}`,
          `Encounter/${given.p2.encounter}`,
          `Task/${given.p2.task}`,
          `QuestionnaireResponse/${given.p2.response}`,
        ];
        const failures: string[] = [];
        let walked = 0;
        for (const [route, probes] of Object.entries(probesFor(cookie)))
          for (const probe of probes) {
            walked++;
            const got = await answer(probe);
            const where = `${route} — ${probe.label}: ${got.status} ${got.body.slice(0, 400)}`;
            const headerText = got.headers.map(([k, v]) => `${k}: ${v}`).join('\n');
            let shownText = `${got.body}\n${headerText}`;
            if (got.status >= 500) failures.push(`server error: ${where}`);
            if (probe.expect === 'shows') {
              // any status below 500
            } else if ('refused' in probe.expect) {
              if (!probe.expect.refused.includes(got.status))
                failures.push(`expected ${probe.expect.refused.join('/')}: ${where}`);
            } else {
              const { like, known, unknown } = probe.expect;
              const other = await answer(like);
              shownText = normalised(shownText.replace(headerText, ''), [known]);
              if (got.status !== other.status)
                failures.push(`status ${got.status} where an unknown value gets ${other.status}: ${where}`);
              const a = normalised(got.body, [known]).replaceAll(/"lastUpdated":"[^"]*"/g, '');
              const b = normalised(other.body, [unknown]).replaceAll(/"lastUpdated":"[^"]*"/g, '');
              if (a !== b)
                failures.push(`answers differently from an unknown value (${b.slice(0, 300)}): ${where}`);
            }
            const leaked = leakedIn(given, shownText);
            if (leaked.length > 0) failures.push(`holds ${leaked.join(', ')}: ${where}`);
            const named = p2References.filter((r) => headerText.includes(r));
            if (named.length > 0) failures.push(`a header names ${named.join(', ')}: ${where}`);
            if (got.status >= 300 && got.status < 400) failures.push(`a redirect: ${where}`);
          }
        expect(failures, failures.join('\n\n')).to.deep.equal([]);
        expect(walked).to.be.greaterThan(100);
        expect((await app.allEvents()).length, 'the walk wrote only AuditEvents').to.equal(eventsBefore);
      });
  });
}
