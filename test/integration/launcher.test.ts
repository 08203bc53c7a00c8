/**
 * The launcher's pure parts (issue 6; spec §4.6): parameter validation (integration/launcher.ts),
 * the transaction Bundle (domain/launch/request.ts) and the reading of its response (commands/launch.ts).
 */
import { expect } from 'chai';
import { readLaunchResponse } from '../../src/commands/launch.js';
import {
  buildLaunchBundle,
  LaunchError,
  type LaunchRequest,
  sessionUserOf,
} from '../../src/domain/launch/request.js';
import { exportStatusText } from '../../src/http/launch/router.js';
import { parseLaunchParams } from '../../src/integration/launcher.js';

const TODAY = new Date('2026-03-01T10:00:00.000Z');
const SYSTEMS = {
  patientSystem: 'urn:h:patient',
  encounterSystem: 'urn:h:encounter',
  staffSystem: 'urn:h:staff',
  taskSystem: 'urn:h:task',
};

const expectLaunchError = (query: Record<string, string | string[]>, pattern: RegExp) => {
  let caught: unknown;
  try {
    parseLaunchParams(query, TODAY);
  } catch (error) {
    caught = error;
  }
  expect(caught, 'a LaunchError').to.be.instanceOf(LaunchError);
  expect((caught as LaunchError).status).to.equal(400);
  expect((caught as LaunchError).message).to.match(pattern);
};

describe('launcher: parameter validation', () => {
  it('accepts the full parameter set and maps sex', () => {
    expect(
      parseLaunchParams(
        { patient: ' P1 ', encounter: 'E1', user: 'U1', supervisor: 'S1', dob: '1970-01-02', sex: 'female' },
        TODAY,
      ),
    ).to.deep.equal({
      patient: 'P1',
      encounter: 'E1',
      user: 'U1',
      supervisor: 'S1',
      dob: '1970-01-02',
      gender: 'female',
    });
  });

  it('maps the HL7 v2 letters M, F, O, U (any case) and the FHIR codes', () => {
    const gender = (sex: string) =>
      parseLaunchParams({ patient: 'P', encounter: 'E', user: 'U', sex }, TODAY).gender;
    expect(['M', 'F', 'O', 'U', 'm', 'f'].map(gender)).to.deep.equal([
      'male',
      'female',
      'other',
      'unknown',
      'male',
      'female',
    ]);
    expect(['male', 'female', 'other', 'unknown', 'Male'].map(gender)).to.deep.equal([
      'male',
      'female',
      'other',
      'unknown',
      'male',
    ]);
  });

  it('keeps only what was given; unknown parameters are ignored', () => {
    expect(
      parseLaunchParams({ patient: 'P', encounter: 'E', supervisor: 'S', foo: 'bar' }, TODAY),
    ).to.deep.equal({
      patient: 'P',
      encounter: 'E',
      supervisor: 'S',
    });
  });

  it('refuses missing or empty patient and encounter', () => {
    expectLaunchError({ encounter: 'E', user: 'U' }, /no patient number/);
    expectLaunchError({ patient: '  ', encounter: 'E', user: 'U' }, /no patient number/);
    expectLaunchError({ patient: 'P', user: 'U' }, /no encounter number/);
  });

  it('refuses a launch with neither user nor supervisor', () => {
    expectLaunchError({ patient: 'P', encounter: 'E' }, /^user or supervisor is required to open a session$/);
  });

  it('refuses malformed, impossible and future dates of birth', () => {
    expectLaunchError(
      { patient: 'P', encounter: 'E', user: 'U', dob: '02.01.1970' },
      /dob must be a date as YYYY-MM-DD/,
    );
    expectLaunchError({ patient: 'P', encounter: 'E', user: 'U', dob: '1970-1-2' }, /YYYY-MM-DD/);
    expectLaunchError({ patient: 'P', encounter: 'E', user: 'U', dob: '2023-02-29' }, /not a real date/);
    expectLaunchError({ patient: 'P', encounter: 'E', user: 'U', dob: '1970-13-01' }, /not a real date/);
    expectLaunchError({ patient: 'P', encounter: 'E', user: 'U', dob: '2026-03-02' }, /in the future/);
    expect(
      parseLaunchParams({ patient: 'P', encounter: 'E', user: 'U', dob: '2024-02-29' }, TODAY).dob,
    ).to.equal('2024-02-29');
  });

  it('refuses unknown sex codes', () => {
    expectLaunchError({ patient: 'P', encounter: 'E', user: 'U', sex: 'X' }, /sex "X" is not a known code/);
  });

  it('refuses repeated parameters, control characters and overlong numbers', () => {
    expectLaunchError({ patient: ['P1', 'P2'], encounter: 'E', user: 'U' }, /patient more than once/);
    expectLaunchError({ patient: 'P\u0000', encounter: 'E', user: 'U' }, /control characters/);
    expectLaunchError({ patient: 'P'.repeat(129), encounter: 'E', user: 'U' }, /too long/);
  });

  it('opens the session for the user, else the supervisor', () => {
    expect(sessionUserOf({ patient: 'P', encounter: 'E', user: 'U', supervisor: 'S' })).to.equal('U');
    expect(sessionUserOf({ patient: 'P', encounter: 'E', supervisor: 'S' })).to.equal('S');
  });
});

describe('launcher: transaction Bundle', () => {
  let n = 0;
  const uuid = () => `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`;
  beforeEach(() => {
    n = 0;
  });
  const request: LaunchRequest = {
    patient: 'P 1',
    encounter: 'E|1',
    user: 'U1',
    supervisor: 'S1',
    dob: '1970-01-02',
    gender: 'female',
  };

  it('conditionally updates Patient, Encounter and both Practitioners and creates the Task if none exists', () => {
    const bundle = buildLaunchBundle(request, SYSTEMS, uuid);
    expect(bundle.resourceType).to.equal('Bundle');
    expect(bundle.type).to.equal('transaction');
    expect(bundle.entry.map((e) => `${e.request.method} ${e.request.url}`)).to.deep.equal([
      `PUT Patient?identifier=${encodeURIComponent('urn:h:patient|P 1')}`,
      `PUT Encounter?identifier=${encodeURIComponent('urn:h:encounter|E|1')}`,
      `PUT Practitioner?identifier=${encodeURIComponent('urn:h:staff|U1')}`,
      `PUT Practitioner?identifier=${encodeURIComponent('urn:h:staff|S1')}`,
      'POST Task',
    ]);
    const [patient, encounter, user, supervisor, task] = bundle.entry;
    expect(patient!.resource).to.deep.equal({
      resourceType: 'Patient',
      identifier: [{ system: 'urn:h:patient', value: 'P 1' }],
      birthDate: '1970-01-02',
      gender: 'female',
    });
    expect(encounter!.resource).to.deep.equal({
      resourceType: 'Encounter',
      identifier: [{ system: 'urn:h:encounter', value: 'E|1' }],
      status: 'in-progress',
      subject: { reference: patient!.fullUrl },
    });
    expect(user!.resource).to.deep.equal({
      resourceType: 'Practitioner',
      identifier: [{ system: 'urn:h:staff', value: 'U1' }],
    });
    expect(supervisor!.resource.identifier).to.deep.equal([{ system: 'urn:h:staff', value: 'S1' }]);
    expect(task!.request.ifNoneExist).to.equal(`identifier=${encodeURIComponent('urn:h:task|E|1')}`);
    expect(task!.resource).to.deep.equal({
      resourceType: 'Task',
      identifier: [{ system: 'urn:h:task', value: 'E|1' }],
      status: 'draft',
      intent: 'order',
      for: { reference: patient!.fullUrl },
      encounter: { reference: encounter!.fullUrl },
      owner: { reference: user!.fullUrl },
    });
    for (const e of bundle.entry) expect(e.fullUrl).to.match(/^urn:uuid:[0-9a-f-]{36}$/);
    expect(new Set(bundle.entry.map((e) => e.fullUrl)).size).to.equal(5);
  });

  it('omits demographics not given, owns the Task by the supervisor without a user, and dedups staff', () => {
    const bundle = buildLaunchBundle({ patient: 'P', encounter: 'E', supervisor: 'S' }, SYSTEMS, uuid);
    expect(bundle.entry).to.have.length(4);
    expect(bundle.entry[0]!.resource).to.deep.equal({
      resourceType: 'Patient',
      identifier: [{ system: 'urn:h:patient', value: 'P' }],
    });
    expect(bundle.entry[3]!.resource.owner).to.deep.equal({ reference: bundle.entry[2]!.fullUrl });
    const same = buildLaunchBundle(
      { patient: 'P', encounter: 'E', user: 'X', supervisor: 'X' },
      SYSTEMS,
      uuid,
    );
    expect(same.entry.filter((e) => e.resource.resourceType === 'Practitioner')).to.have.length(1);
  });

  it('reads the ids from the transaction-response', () => {
    const bundle = buildLaunchBundle(request, SYSTEMS, uuid);
    const entry = (status: string, location: string) => ({ response: { status, location } });
    const ids = readLaunchResponse(bundle, {
      resourceType: 'Bundle',
      type: 'transaction-response',
      entry: [
        entry('200 OK', 'Patient/1/_history/1'),
        entry('200 OK', 'Encounter/2/_history/1'),
        entry('200 OK', 'Practitioner/3/_history/1'),
        entry('200 OK', 'Practitioner/4/_history/2'),
        entry('201 Created', 'Task/5/_history/1'),
      ],
    });
    expect(ids).to.deep.equal({
      patientId: 1,
      encounterId: 2,
      practitioners: new Map([
        ['U1', 3],
        ['S1', 4],
      ]),
      taskId: 5,
      taskCreated: true,
    });
    expect(() => readLaunchResponse(bundle, { resourceType: 'OperationOutcome' }))
      .to.throw(LaunchError, /unexpected response/)
      .with.property('status', 502);
  });
});

describe('launcher: export status text of the submitted page', () => {
  it('describes each state, and unknown without a status; a failed attempt is not a failure until abandoned', () => {
    expect(exportStatusText(undefined).label).to.equal('unknown');
    const sending = {
      label: 'sending',
      detail: 'The report is saved in casebook and is still being sent to the hospital system.',
    };
    expect(exportStatusText({ state: 'pending', attempts: 0 })).to.deep.equal(sending);
    expect(
      exportStatusText({ state: 'failed', attempts: 3, lastError: 'HTTP 503 from the export sink' }),
    ).to.deep.equal(sending);
    expect(
      exportStatusText({ state: 'delivered', attempts: 1, deliveredAt: '2026-03-01T10:00:00.000Z' }).detail,
    ).to.equal('The report was delivered to the hospital system at 2026-03-01T10:00:00.000Z.');
    expect(exportStatusText({ state: 'abandoned', attempts: 50, lastError: 'gave up' })).to.deep.equal({
      label: 'failed',
      detail:
        'Delivery to the hospital system failed. The report is saved in casebook. Please contact IT support.',
    });
    expect(exportStatusText({ state: 'disabled', attempts: 0 }).label).to.equal('disabled');
  });
});
