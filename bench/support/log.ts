/**
 * A realistic event log for `npm run bench:replay`, written through the event store's append API
 * (`appendMany`, one atomic append per command, as the command handler does).
 *
 * Each "case" is one report's life as casebook records it: a Patient, an Encounter and a Task
 * (each with its identifier reservation, in the same append), a session created by the EHR and
 * handed over, the QuestionnaireResponse started (with the Task moved to in-progress), saved twice,
 * submitted (with the Task completed), exported, and one AuditEvent record per request, group
 * committed 8 to an `AuditEventsRecorded` event in its audit stream. The log starts with a
 * tenant, its API client and a Questionnaire.
 */
import { createHash, randomBytes } from 'node:crypto';
import { v4 as uuidv4 } from 'uuid';
import { AUDIT_EVENTS_RECORDED, auditStream } from '../../src/domain/audit/audit.js';
import { exportStream } from '../../src/domain/export/export.js';
import { EVENT_NAMES, type ResourceType, resourceStream } from '../../src/domain/fhir/resource.js';
import { identifierKey, reservationStream } from '../../src/domain/reservation/reservation.js';
import { sessionStream } from '../../src/domain/session/session.js';
import { tenantStream } from '../../src/domain/tenant/tenant.js';
import type { AppendRequest, EventMetadata, EventStore, NewEvent } from '../../src/eventstore/port.js';
import type { AuditRecord } from '../../src/fhir/audit-event.js';

const TENANT = 1;
const CLIENT_ID = 'bench-ehr';
const QUESTIONNAIRE = 'https://casebook.dev/fhir/Questionnaire/chest-xray|1.0';
const PATIENT_SYSTEM = 'urn:casebook:hospital:patient';
const ENCOUNTER_SYSTEM = 'urn:casebook:hospital:encounter';
const TASK_SYSTEM = 'urn:casebook:hospital:encounter-task';

const hash = (text: string) => createHash('sha256').update(text).digest('hex');

/** Builds the events of one log; ids are counters, times advance by a few seconds per case. */
class LogBuilder {
  private nextId = 100;
  private clock = Date.parse('2026-01-05T07:00:00Z');
  private readonly pendingAudit: { record: AuditRecord; metadata: EventMetadata }[] = [];

  private now(stepMs = 700): string {
    this.clock += stepMs;
    return new Date(this.clock).toISOString();
  }

  private metadata(actor: EventMetadata['actor'], at: string, correlationId: string): EventMetadata {
    return {
      tenantId: TENANT,
      actor,
      correlationId,
      causationId: correlationId,
      requestId: correlationId,
      recordedAt: at,
    };
  }

  private event(type: string, data: unknown, metadata: EventMetadata): NewEvent {
    return { id: uuidv4(), type, data, metadata };
  }

  /** One AuditEvent record for a request, group committed with the next few. */
  private audit(
    interaction: string,
    action: AuditRecord['action'],
    status: number,
    reference: string,
    patientId: number,
    at: string,
    requestId: string,
    sessionId?: number,
  ) {
    const record: AuditRecord = {
      id: uuidv4(),
      tenantId: TENANT,
      interaction,
      action,
      recorded: at,
      status,
      agent:
        sessionId === undefined
          ? { kind: 'client', clientId: CLIENT_ID }
          : { kind: 'session', sessionId, practitionerId: 2 },
      entities: [{ reference, patientId }],
      clientAddress: '10.1.2.3',
      requestId,
    };
    this.pendingAudit.push({
      record,
      metadata: this.metadata({ type: 'system', id: 'audit' }, at, requestId),
    });
  }

  /**
   * The audit streams gathered so far: batches of up to 8 records, each one `AuditEventsRecorded`
   * event in its own stream, as the group commit writes them.
   */
  flushAudit(): AppendRequest[] {
    const requests: AppendRequest[] = [];
    while (this.pendingAudit.length > 0) {
      const batch = this.pendingAudit.splice(0, 8);
      requests.push({
        streamName: auditStream(uuidv4()),
        events: [
          this.event(AUDIT_EVENTS_RECORDED, { records: batch.map((b) => b.record) }, batch[0]!.metadata),
        ],
        expectedState: 'no_stream',
      });
    }
    return requests;
  }

  private created(
    type: ResourceType,
    id: number,
    resource: Record<string, unknown>,
    meta: EventMetadata,
  ): NewEvent {
    return this.event(
      EVENT_NAMES[type].created,
      { id, tenantId: TENANT, resource, at: meta.recordedAt },
      meta,
    );
  }

  private reservation(
    type: ResourceType,
    id: number,
    system: string,
    value: string,
    meta: EventMetadata,
  ): AppendRequest {
    const key = identifierKey(type, TENANT, system, value);
    return {
      streamName: reservationStream(key),
      events: [
        this.event(
          'ReservationClaimed',
          { key, ownerType: type, ownerId: String(id), at: meta.recordedAt },
          meta,
        ),
      ],
      expectedState: 'no_stream',
    };
  }

  /** The tenant, its client, the Practitioner and the Questionnaire every case uses. */
  start(): AppendRequest[][] {
    const at = this.now();
    const meta = this.metadata({ type: 'system', id: 'cli:bench' }, at, uuidv4());
    const questionnaire = {
      url: QUESTIONNAIRE.split('|')[0],
      version: '1.0',
      status: 'active',
      title: 'Chest X-ray report',
      item: ['indication', 'findings', 'impression', 'recommendation'].map((linkId) => ({
        linkId,
        text: linkId[0]?.toUpperCase() + linkId.slice(1),
        type: 'text',
        required: linkId !== 'recommendation',
      })),
    };
    return [
      [
        {
          streamName: tenantStream(TENANT),
          events: [
            this.event(
              'TenantCreated',
              {
                tenantId: TENANT,
                name: 'Bench Hospital',
                createdAt: at,
                ehrManaged: false,
                allowedScopes: ['patient/*.cruds', 'user/*.cruds'],
                redirectOrigins: ['https://ehr.example.org'],
              },
              meta,
            ),
          ],
          expectedState: 'no_stream',
        },
      ],
      [
        {
          streamName: resourceStream('Practitioner', 2),
          events: [
            this.created(
              'Practitioner',
              2,
              {
                identifier: [{ system: 'urn:casebook:hospital:staff', value: 'dr-house' }],
                name: [{ family: 'House', given: ['Gregory'] }],
              },
              meta,
            ),
          ],
          expectedState: 'no_stream',
        },
        {
          streamName: resourceStream('Questionnaire', 3),
          events: [
            this.event(
              EVENT_NAMES.Questionnaire.created,
              { id: 3, tenantId: TENANT, resource: questionnaire, at, project: 'radiology' },
              meta,
            ),
          ],
          expectedState: 'no_stream',
        },
      ],
    ];
  }

  /** The appends of one case, in the order the commands make them. */
  nextCase(): AppendRequest[][] {
    const n = this.nextId;
    const patient = this.nextId++;
    const encounter = this.nextId++;
    const task = this.nextId++;
    const response = this.nextId++;
    const session = this.nextId++;
    const client = { type: 'client' as const, id: CLIENT_ID };
    const appends: AppendRequest[][] = [];
    const step = (actor: EventMetadata['actor']) => {
      const at = this.now(1_000 + (n % 7) * 300);
      return this.metadata(actor, at, uuidv4());
    };
    const subject = { reference: `Patient/${patient}` };

    // Launch: the transaction Bundle (Patient, Encounter, Task with reservations) and the session.
    let meta = step(client);
    const patientValue = `P-${n}`;
    const encounterValue = `E-${n}`;
    appends.push([
      {
        streamName: resourceStream('Patient', patient),
        events: [
          this.created(
            'Patient',
            patient,
            {
              identifier: [{ system: PATIENT_SYSTEM, value: patientValue }],
              name: [{ family: `Family${n % 997}`, given: ['Alex', `M${n % 13}`] }],
              gender: n % 2 ? 'female' : 'male',
              birthDate: `19${40 + (n % 60)}-0${1 + (n % 9)}-${10 + (n % 18)}`,
            },
            meta,
          ),
        ],
        expectedState: 'no_stream',
      },
      this.reservation('Patient', patient, PATIENT_SYSTEM, patientValue, meta),
      {
        streamName: resourceStream('Encounter', encounter),
        events: [
          this.created(
            'Encounter',
            encounter,
            {
              identifier: [{ system: ENCOUNTER_SYSTEM, value: encounterValue }],
              status: 'in-progress',
              class: [
                { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode', code: 'AMB' }] },
              ],
              subject,
            },
            meta,
          ),
        ],
        expectedState: 'no_stream',
      },
      this.reservation('Encounter', encounter, ENCOUNTER_SYSTEM, encounterValue, meta),
      {
        streamName: resourceStream('Task', task),
        events: [
          this.created(
            'Task',
            task,
            {
              identifier: [{ system: TASK_SYSTEM, value: encounterValue }],
              status: 'draft',
              intent: 'order',
              for: subject,
              encounter: { reference: `Encounter/${encounter}` },
            },
            meta,
          ),
        ],
        expectedState: 'no_stream',
      },
      this.reservation('Task', task, TASK_SYSTEM, encounterValue, meta),
    ]);
    this.audit('transaction', 'U', 200, `Patient/${patient}`, patient, meta.recordedAt, meta.requestId ?? '');

    meta = step(client);
    const scopes = ['patient/*.cruds', 'user/Questionnaire.rs', 'launch'];
    appends.push([
      {
        streamName: sessionStream(session),
        events: [
          this.event(
            'SessionCreated',
            {
              sessionId: session,
              tenantId: TENANT,
              clientId: CLIENT_ID,
              userId: 2,
              patientId: patient,
              encounterId: encounter,
              scopes,
              deploymentMode: 'embedded',
              postSubmitRedirect: `https://ehr.example.org/done?case=${n}`,
              postCancelRedirect: null,
              handoverTokenHash: hash(randomBytes(8).toString('hex')),
              handoverExpiresAt: new Date(Date.parse(meta.recordedAt) + 300_000).toISOString(),
              createdAt: meta.recordedAt,
              expiresAt: new Date(Date.parse(meta.recordedAt) + 648_000_000).toISOString(),
            },
            meta,
          ),
        ],
        expectedState: 'no_stream',
      },
    ]);
    this.audit(
      'session-create',
      'C',
      201,
      `Patient/${patient}`,
      patient,
      meta.recordedAt,
      meta.requestId ?? '',
    );
    const sessionActor = { type: 'session' as const, id: String(session) };
    meta = step(sessionActor);
    appends.push([
      {
        streamName: sessionStream(session),
        events: [
          this.event(
            'SessionHandedOver',
            { sessionId: session, cookieHash: hash(String(n)), at: meta.recordedAt },
            meta,
          ),
        ],
        expectedState: 0n,
      },
    ]);
    this.audit(
      'session-handover',
      'E',
      303,
      `Patient/${patient}`,
      patient,
      meta.recordedAt,
      meta.requestId ?? '',
      session,
    );

    // Start of the report: the response created, the Task moved to in-progress.
    const taskContent = (status: string) => ({
      identifier: [{ system: TASK_SYSTEM, value: encounterValue }],
      status,
      intent: 'order',
      for: subject,
      encounter: { reference: `Encounter/${encounter}` },
      focus: { reference: `QuestionnaireResponse/${response}` },
      output: [
        { type: { text: 'report' }, valueReference: { reference: `QuestionnaireResponse/${response}` } },
      ],
    });
    const answers = (filled: number, status: string) => ({
      questionnaire: QUESTIONNAIRE,
      status,
      subject,
      encounter: { reference: `Encounter/${encounter}` },
      author: { reference: 'Practitioner/2' },
      authored: meta.recordedAt,
      item: [
        ['indication', 'Persistent cough for three weeks, fever; rule out pneumonia.'],
        [
          'findings',
          'Patchy consolidation in the right lower lobe. No pleural effusion. Heart size normal. No pneumothorax.',
        ],
        ['impression', 'Right lower lobe pneumonia.'],
        ['recommendation', 'Follow-up radiograph in 6 weeks after treatment.'],
      ]
        .slice(0, filled)
        .map(([linkId, text]) => ({ linkId, answer: [{ valueString: text }] })),
    });
    meta = step(sessionActor);
    appends.push([
      {
        streamName: resourceStream('QuestionnaireResponse', response),
        events: [
          this.event(
            EVENT_NAMES.QuestionnaireResponse.created,
            {
              id: response,
              tenantId: TENANT,
              resource: answers(0, 'in-progress'),
              at: meta.recordedAt,
              author: 'Practitioner/2',
            },
            meta,
          ),
        ],
        expectedState: 'no_stream',
      },
      {
        streamName: resourceStream('Task', task),
        events: [
          this.event(
            EVENT_NAMES.Task.statusChanged ?? '',
            { id: task, resource: taskContent('in-progress'), at: meta.recordedAt, from: 'draft' },
            meta,
          ),
        ],
        expectedState: 0n,
      },
    ]);
    this.audit(
      'report-start',
      'C',
      201,
      `QuestionnaireResponse/${response}`,
      patient,
      meta.recordedAt,
      meta.requestId ?? '',
      session,
    );
    for (const [revision, filled] of [
      [0n, 2],
      [1n, 3],
    ] as const) {
      meta = step(sessionActor);
      appends.push([
        {
          streamName: resourceStream('QuestionnaireResponse', response),
          events: [
            this.event(
              EVENT_NAMES.QuestionnaireResponse.updated,
              { id: response, resource: answers(filled, 'in-progress'), at: meta.recordedAt },
              meta,
            ),
          ],
          expectedState: revision,
        },
      ]);
      this.audit(
        'update',
        'U',
        200,
        `QuestionnaireResponse/${response}`,
        patient,
        meta.recordedAt,
        meta.requestId ?? '',
        session,
      );
    }
    meta = step(sessionActor);
    appends.push([
      {
        streamName: resourceStream('QuestionnaireResponse', response),
        events: [
          this.event(
            EVENT_NAMES.QuestionnaireResponse.statusChanged ?? '',
            { id: response, resource: answers(4, 'completed'), at: meta.recordedAt, from: 'in-progress' },
            meta,
          ),
        ],
        expectedState: 2n,
      },
      {
        streamName: resourceStream('Task', task),
        events: [
          this.event(
            EVENT_NAMES.Task.statusChanged ?? '',
            { id: task, resource: taskContent('completed'), at: meta.recordedAt, from: 'in-progress' },
            meta,
          ),
        ],
        expectedState: 1n,
      },
    ]);
    this.audit(
      'report-submit',
      'U',
      200,
      `QuestionnaireResponse/${response}`,
      patient,
      meta.recordedAt,
      meta.requestId ?? '',
      session,
    );
    meta = step({ type: 'system', id: 'exporter' });
    appends.push([
      {
        streamName: exportStream(response),
        events: [
          this.event(
            'ReportExported',
            {
              responseId: response,
              version: 4,
              sink: 'mllp://ris.example.org',
              attempt: 1,
              at: meta.recordedAt,
            },
            meta,
          ),
        ],
        expectedState: 'no_stream',
      },
    ]);
    this.audit(
      'export',
      'E',
      200,
      `QuestionnaireResponse/${response}`,
      patient,
      meta.recordedAt,
      meta.requestId ?? '',
    );
    // The EHR reads the report back.
    meta = step(client);
    this.audit(
      'read',
      'R',
      200,
      `QuestionnaireResponse/${response}`,
      patient,
      meta.recordedAt,
      meta.requestId ?? '',
    );
    return appends;
  }
}

/**
 * Appends a log of at least `events` events to `store`: each appendMany of a case as the command
 * handler would make it, `concurrency` cases at a time.
 * @returns the number of events appended.
 */
export const generateLog = async (
  store: EventStore,
  events: number,
  options: { concurrency?: number; onProgress?: (appended: number) => void } = {},
): Promise<number> => {
  const builder = new LogBuilder();
  let appended = 0;
  const appendAll = async (requests: AppendRequest[]) => {
    await store.appendMany(requests);
    appended += requests.reduce((sum, r) => sum + r.events.length, 0);
  };
  for (const requests of builder.start()) await appendAll(requests);
  const concurrency = options.concurrency ?? 4;
  while (appended < events) {
    const cases = Array.from({ length: concurrency * 4 }, () => builder.nextCase());
    // Each worker appends its cases' commands in order; workers run side by side.
    await Promise.all(
      Array.from({ length: concurrency }, async (_, worker) => {
        for (let i = worker; i < cases.length; i += concurrency)
          for (const requests of cases[i] ?? []) await appendAll(requests);
      }),
    );
    for (const request of builder.flushAudit()) await appendAll([request]);
    options.onProgress?.(appended);
  }
  return appended;
};
