/**
 * AuditEvents from records (issue 14; docs/architecture.md "Audit trail"): the log keeps the
 * compact record, the AuditEvent resource is rendered from it — valid FHIR R5 for every kind of
 * agent, with references and codes only — and events of an older log that carry the whole
 * resource read the same way.
 */
import { expect } from 'chai';
import { type AuditRecord, auditEventOf, auditEventsIn, toAuditEvent } from '../../src/fhir/audit-event.js';
import { auditIndex, recordIndex } from '../../src/projections/audit-events.js';
import { assertFhirJson } from '../support/fhir.js';
import { assertR5Resource } from '../support/fhir-schema.js';

const record = (agent: AuditRecord['agent'], status = 200): AuditRecord => ({
  id: '6f1c9a52-3d7e-4b8a-9c0d-1e2f3a4b5c6d',
  tenantId: 1,
  interaction: 'read',
  action: 'R',
  recorded: '2026-03-01T10:00:00.000Z',
  status,
  agent,
  entities: [
    { reference: 'Patient/7', patientId: 7 },
    { reference: 'Task/9', patientId: 7 },
  ],
  clientAddress: '10.1.2.3',
  requestId: 'req-1',
});

/** One agent of every kind (a session with and without its Practitioner). */
const agents: AuditRecord['agent'][] = [
  { kind: 'client', clientId: 'ehr-backend' },
  { kind: 'session', sessionId: 3, practitionerId: 5 },
  { kind: 'session', sessionId: 4, practitionerId: null },
  { kind: 'system', name: 'export' },
  { kind: 'anonymous' },
];

describe('AuditEvent from a record', () => {
  for (const agent of agents)
    for (const status of [200, 403])
      it(`is a valid R5 AuditEvent for a ${agent.kind} agent answered ${status}`, () => {
        const auditEvent = toAuditEvent(record(agent, status));
        assertFhirJson(auditEvent, 'toAuditEvent');
        assertR5Resource(auditEvent, 'toAuditEvent');
        expect(auditEvent).to.deep.include({ resourceType: 'AuditEvent', action: 'R' });
        expect(auditEvent.patient).to.deep.equal({ reference: 'Patient/7' });
        expect((auditEvent.outcome as { code: { code: string } }).code.code).to.equal(
          status === 200 ? '0' : '4',
        );
      });

  it('reads an event that carries the record and one of an older log that carries the resource alike', () => {
    const r = record({ kind: 'client', clientId: 'ehr-backend' });
    const rendered = toAuditEvent(r);
    expect(auditEventOf({ record: r })).to.deep.equal(rendered);
    expect(auditEventOf({ auditEvent: rendered })).to.equal(rendered);
  });

  it('finds every AuditEvent of a batch event, the one of an older single event, and none in other events', () => {
    const a = record({ kind: 'client', clientId: 'ehr-backend' });
    const b = { ...a, id: '7a2d0b63-4e8f-4c9b-8d1e-2f3a4b5c6d7e' };
    expect(auditEventsIn({ type: 'AuditEventsRecorded', data: { records: [a, b] } })).to.deep.equal([
      { resource: toAuditEvent(a), content: a },
      { resource: toAuditEvent(b), content: b },
    ]);
    expect(auditEventsIn({ type: 'AuditEventRecorded', data: { record: a } })).to.deep.equal([
      { resource: toAuditEvent(a), content: a },
    ]);
    const rendered = toAuditEvent(a);
    expect(auditEventsIn({ type: 'AuditEventRecorded', data: { auditEvent: rendered } })).to.deep.equal([
      { resource: rendered, content: rendered },
    ]);
    expect(auditEventsIn({ type: 'PatientRegistered', data: { id: 7 } })).to.deep.equal([]);
  });
});

describe('the AuditEvent search index read off a record', () => {
  const sorted = (index: ReturnType<typeof auditIndex>) => ({
    ...index,
    agents: [...index.agents].sort(),
    entities: [...index.entities].sort(),
    patients: [...index.patients].sort((a, b) => a - b),
  });
  const entityLists: AuditRecord['entities'][] = [
    [],
    [{ reference: 'Patient/7', patientId: 7 }],
    [
      { reference: 'Patient/7', patientId: 7 },
      { reference: 'Task/9', patientId: 7 },
    ],
    [
      { reference: 'Encounter/2', patientId: 7 },
      { reference: 'Task/9', patientId: 8 },
      { reference: 'Questionnaire/1', patientId: null },
    ],
    [{ reference: 'Session/12' }, { reference: 'Patient/99999999999' }, { reference: 'Patient/3' }],
    [
      { reference: 'Task/1', patientId: -1 },
      { reference: 'Task/2', patientId: 2.5 },
      { reference: 'nonsense' },
    ],
    // AuditEvent.patient (the one patient of the entities) counts even when no reference names it.
    [{ reference: 'Patient/7', patientId: 9 }],
    [{ reference: 'Session/5', patientId: 4 }],
  ];
  let n = 0;
  for (const agent of agents)
    for (const entities of entityLists)
      for (const status of [200, 403, 500]) {
        n += 1;
        it(`is the index of the rendered resource (${agent.kind}, ${entities.length} entities, ${status}) #${n}`, () => {
          const r: AuditRecord = {
            ...record(agent, status),
            entities,
            interaction: n % 2 ? 'read' : 'launch',
          };
          expect(sorted(recordIndex(r))).to.deep.equal(sorted(auditIndex(toAuditEvent(r))));
        });
      }
});
