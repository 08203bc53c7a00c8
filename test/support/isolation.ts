/**
 * Two patients of one tenant, for the tests that a session of one never sees the other's data
 * (issue 33; docs/architecture.md "Security"): P1, the session's patient, and P2 with an
 * Encounter, Tasks and reports whose identifier values, names and answer texts are distinctive
 * strings (`secrets`) that no answer to a P1 session may contain. Everything is written by the
 * tenant's API client (tenant-wide), as an EHR would.
 */
import { expect } from 'chai';
import { GENERAL, type TestApp, unique } from './app.js';
import { fhir, sessionCookie } from './fhir.js';

export const MRN_SYSTEM = 'urn:test:isolation:mrn';
export const ENCOUNTER_SYSTEM = 'urn:test:isolation:encounter';
export const TASK_SYSTEM = 'urn:test:isolation:task';

/** The session scopes of the issue: `user/*.*` with a patient, and `patient/*.* user/*.*`. */
export const SESSION_SCOPES = ['user/*.*', 'patient/*.* user/*.*'] as const;

export interface TwoPatients {
  readonly user: number;
  readonly questionnaireUrl: string;
  readonly questionnaire: number;
  readonly valueSet: number;
  readonly p1: { readonly patient: number; readonly mrn: string; readonly encounter: number };
  readonly p2: {
    readonly patient: number;
    readonly mrn: string;
    readonly encounter: number;
    readonly encounterIdentifier: string;
    /** A `ready` Task of P2 whose focus is `response`. */
    readonly task: number;
    readonly taskIdentifier: string;
    /** A `draft` Task of P2. */
    readonly draftTask: number;
    readonly response: number;
  };
  /** A report about P2 (version 1) moved to P1 by a PUT (version 2). */
  readonly moved: { readonly response: number; readonly firstVersionAt: string };
  /** Tasks of P1 that point at P2's data: its report (focus; output), its Encounter. */
  readonly crossing: {
    readonly focus: number;
    readonly output: number;
    /** An output valueReference as an absolute URL. */
    readonly absoluteOutput: number;
    readonly encounter: number;
    /** A report of P1 made during P2's Encounter. */
    readonly encounterResponse: number;
  };
  /** Strings of P2 that no answer to a P1 session may hold: identifier values, names, answers. */
  readonly secrets: readonly string[];
}

const create = async (app: TestApp, body: Record<string, unknown>): Promise<number> => {
  const res = await fhir(app, 'POST', `/${body.resourceType}`, { body, auth: GENERAL });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return Number(res.body.id);
};

/** Creates P1, P2 and what surrounds them in the General Hospital tenant of TEST_SEED. */
export const givenTwoPatients = async (app: TestApp): Promise<TwoPatients> => {
  const tag = unique('iso').replace(/[^A-Za-z0-9]/g, '');
  const secret = (what: string) => `${what}${tag}Secret`;
  const user = await create(app, {
    resourceType: 'Practitioner',
    identifier: [{ system: 'urn:test:isolation:staff', value: unique('dr') }],
    name: [{ family: 'Reader' }],
  });
  const questionnaireUrl = `https://forms.example.org/Questionnaire/${unique('iso')}`;
  const questionnaire = await create(app, {
    resourceType: 'Questionnaire',
    url: questionnaireUrl,
    version: '1',
    status: 'active',
    title: 'Isolation form',
    item: [{ linkId: 'findings', text: 'Findings', type: 'string' }],
  });
  const valueSet = await create(app, {
    resourceType: 'ValueSet',
    url: `https://forms.example.org/ValueSet/${unique('iso')}`,
    status: 'active',
    compose: { include: [{ system: 'urn:test:codes', concept: [{ code: 'a', display: 'A' }] }] },
  });
  const p1Mrn = unique('p1-mrn');
  const p1 = await create(app, {
    resourceType: 'Patient',
    identifier: [{ system: MRN_SYSTEM, value: p1Mrn }],
    name: [{ family: 'Onesson', given: ['Ann'] }],
  });
  const p1Encounter = await create(app, {
    resourceType: 'Encounter',
    status: 'in-progress',
    identifier: [{ system: ENCOUNTER_SYSTEM, value: unique('p1-enc') }],
    subject: { reference: `Patient/${p1}` },
  });
  const p2Mrn = secret('mrn');
  const p2 = await create(app, {
    resourceType: 'Patient',
    identifier: [{ system: MRN_SYSTEM, value: p2Mrn }],
    name: [{ family: secret('Family'), given: [secret('Given')] }],
    birthDate: '1961-02-03',
  });
  const encounterIdentifier = secret('enc');
  const p2Encounter = await create(app, {
    resourceType: 'Encounter',
    status: 'in-progress',
    identifier: [{ system: ENCOUNTER_SYSTEM, value: encounterIdentifier }],
    subject: { reference: `Patient/${p2}` },
  });
  const report = (patient: number, answer: string, extra: Record<string, unknown> = {}) => ({
    resourceType: 'QuestionnaireResponse',
    questionnaire: questionnaireUrl,
    status: 'in-progress',
    subject: { reference: `Patient/${patient}` },
    item: [{ linkId: 'findings', text: 'Findings', answer: [{ valueString: answer }] }],
    ...extra,
  });
  const response = await create(
    app,
    report(p2, secret('answer'), { encounter: { reference: `Encounter/${p2Encounter}` } }),
  );
  const taskIdentifier = secret('task');
  const task = await create(app, {
    resourceType: 'Task',
    identifier: [{ system: TASK_SYSTEM, value: taskIdentifier }],
    status: 'ready',
    intent: 'order',
    for: { reference: `Patient/${p2}` },
    encounter: { reference: `Encounter/${p2Encounter}` },
    focus: { reference: `QuestionnaireResponse/${response}` },
  });
  const draftTask = await create(app, {
    resourceType: 'Task',
    identifier: [{ system: TASK_SYSTEM, value: secret('draft') }],
    status: 'draft',
    intent: 'order',
    for: { reference: `Patient/${p2}` },
  });
  // The report moved from P2 to P1: version 1 is about P2.
  const moved = await create(app, report(p2, secret('movedAnswer')));
  const firstVersionAt = app.casebook.clock().toISOString();
  app.advance(60_000);
  const put = await fhir(app, 'PUT', `/QuestionnaireResponse/${moved}`, {
    body: { ...report(p1, 'Unremarkable'), id: String(moved) },
    auth: GENERAL,
  });
  expect(put.status, JSON.stringify(put.body)).to.equal(200);
  const p1Task = (extra: Record<string, unknown>) =>
    create(app, {
      resourceType: 'Task',
      identifier: [{ system: TASK_SYSTEM, value: unique('p1-task') }],
      status: 'ready',
      intent: 'order',
      for: { reference: `Patient/${p1}` },
      ...extra,
    });
  const fhirBase = app.casebook.config.fhirUrl;
  return {
    user,
    questionnaireUrl,
    questionnaire,
    valueSet,
    p1: { patient: p1, mrn: p1Mrn, encounter: p1Encounter },
    p2: {
      patient: p2,
      mrn: p2Mrn,
      encounter: p2Encounter,
      encounterIdentifier,
      task,
      taskIdentifier,
      draftTask,
      response,
    },
    moved: { response: moved, firstVersionAt },
    crossing: {
      focus: await p1Task({ focus: { reference: `QuestionnaireResponse/${response}` } }),
      output: await p1Task({
        output: [
          {
            type: { text: 'questionnaire-response' },
            valueReference: { reference: `QuestionnaireResponse/${response}` },
          },
        ],
      }),
      absoluteOutput: await p1Task({
        output: [
          {
            type: { text: 'questionnaire-response' },
            valueReference: { reference: `${fhirBase}/QuestionnaireResponse/${response}` },
          },
        ],
      }),
      encounter: await p1Task({
        status: 'draft',
        encounter: { reference: `Encounter/${p2Encounter}` },
      }),
      encounterResponse: await create(
        app,
        report(p1, 'Unremarkable', { encounter: { reference: `Encounter/${p2Encounter}` } }),
      ),
    },
    secrets: [
      p2Mrn,
      secret('Family'),
      secret('Given'),
      encounterIdentifier,
      taskIdentifier,
      secret('draft'),
      secret('answer'),
      secret('movedAnswer'),
    ],
  };
};

/** A session of the fixture's user limited to P1 with `scope` (a cookie for every host). */
export const p1Session = async (app: TestApp, given: TwoPatients, scope: string): Promise<string> =>
  (await sessionCookie(app, { user: given.user, patient: given.p1.patient, scope })).cookie.cookie;

/** The secrets of `given` that `text` holds (none expected). */
export const leakedIn = (given: TwoPatients, text: string): string[] =>
  given.secrets.filter((s) => text.includes(s));

/** `{app_url}` as the tests reach it, and the Origin of its own pages. */
export const appUrlOf = (app: TestApp) => ({
  url: app.casebook.config.appUrl.replace('//localhost:', '//127.0.0.1:').replace(/\/+$/, ''),
  origin: new URL(app.casebook.config.appUrl).origin,
});
