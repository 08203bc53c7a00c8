/**
 * Building FHIR R5 AuditEvent resources (docs/architecture.md "Audit trail"; issue 14): who (the
 * API client, or the session and its Practitioner), what (the action and the entities with their
 * patient), when, from where (client address, request id), and the outcome. References and codes
 * only: no names, identifiers' values or query strings, which may be patient data.
 */
import {
  AUDIT_EVENT_RECORDED,
  AUDIT_EVENTS_RECORDED,
  type AuditAgent,
  type AuditEventRecordedData,
  type AuditEventResource,
  type AuditEventsRecordedData,
  type AuditRecord,
} from '../domain/audit/audit.js';
import { statusText } from '../status-text.js';

export type { AuditAction, AuditAgent, AuditEntity, AuditRecord } from '../domain/audit/audit.js';

/** FHIR restful interactions; the others are casebook's own codes. */
const RESTFUL = new Set([
  'read',
  'vread',
  'update',
  'patch',
  'delete',
  'history',
  'history-instance',
  'history-type',
  'history-system',
  'create',
  'search',
  'search-type',
  'search-system',
  'capabilities',
  'transaction',
  'batch',
  'operation',
]);

export const AUDIT_CODE_SYSTEM = 'https://casebook.dev/fhir/CodeSystem/audit';
export const CLIENT_SYSTEM = 'https://casebook.dev/fhir/NamingSystem/api-client';
export const SESSION_SYSTEM = 'https://casebook.dev/fhir/NamingSystem/session';
export const REQUEST_ID_EXTENSION = 'https://casebook.dev/fhir/StructureDefinition/request-id';

/** R5 audit-event-outcome: 0 success, 4 minor failure (refused request), 8 serious failure (server error). */
export const outcomeCode = (status: number): '0' | '4' | '8' =>
  status < 400 ? '0' : status < 500 ? '4' : '8';

/**
 * The references an agent is searchable by (`agent=`): `Practitioner/7`, `<client system>|demo-ehr`
 * and the bare `demo-ehr`, `<session system>|3` — the keys of the agents {@link toAuditEvent} renders.
 */
export const agentKeys = (agent: AuditAgent): string[] => {
  switch (agent.kind) {
    case 'client':
      return [`${CLIENT_SYSTEM}|${agent.clientId}`, agent.clientId];
    case 'session':
      return [
        `${SESSION_SYSTEM}|${agent.sessionId}`,
        ...(agent.practitionerId !== null ? [`Practitioner/${agent.practitionerId}`] : []),
      ];
    // casebook itself and an unauthenticated caller are named by a display only: nothing to search by.
    case 'system':
    case 'anonymous':
      return [];
  }
};

const agentsOf = (agent: AuditAgent, network?: string): Record<string, unknown>[] => {
  const networkOf = network ? { networkString: network } : {};
  switch (agent.kind) {
    case 'client':
      return [
        {
          type: {
            coding: [
              {
                system: 'http://dicom.nema.org/resources/ontology/DCM',
                code: '110150',
                display: 'Application',
              },
            ],
          },
          who: {
            identifier: { system: CLIENT_SYSTEM, value: agent.clientId },
            display: `API client ${agent.clientId}`,
          },
          requestor: true,
          ...networkOf,
        },
      ];
    case 'session':
      return [
        ...(agent.practitionerId !== null
          ? [{ who: { reference: `Practitioner/${agent.practitionerId}` }, requestor: true, ...networkOf }]
          : []),
        {
          type: {
            coding: [
              {
                system: 'http://dicom.nema.org/resources/ontology/DCM',
                code: '110150',
                display: 'Application',
              },
            ],
          },
          who: {
            identifier: { system: SESSION_SYSTEM, value: String(agent.sessionId) },
            display: `session ${agent.sessionId}`,
          },
          requestor: agent.practitionerId === null,
          ...networkOf,
        },
      ];
    case 'system':
      return [{ who: { display: `casebook ${agent.name}` }, requestor: true }];
    case 'anonymous':
      return [{ who: { display: 'unauthenticated' }, requestor: true, ...networkOf }];
  }
};

/** The AuditEvent resource of a record. */
export const toAuditEvent = (record: AuditRecord): AuditEventResource => {
  const patients = [
    ...new Set(record.entities.map((e) => e.patientId).filter((p): p is number => typeof p === 'number')),
  ];
  const outcome = outcomeCode(record.status);
  return {
    resourceType: 'AuditEvent',
    id: record.id,
    ...(record.requestId
      ? { extension: [{ url: REQUEST_ID_EXTENSION, valueString: record.requestId }] }
      : {}),
    category: [
      {
        coding: [
          RESTFUL.has(record.interaction)
            ? {
                system: 'http://terminology.hl7.org/CodeSystem/audit-event-type',
                code: 'rest',
                display: 'RESTful Operation',
              }
            : { system: AUDIT_CODE_SYSTEM, code: 'application', display: 'casebook application activity' },
        ],
      },
    ],
    code: {
      coding: [
        RESTFUL.has(record.interaction)
          ? { system: 'http://hl7.org/fhir/restful-interaction', code: record.interaction }
          : { system: AUDIT_CODE_SYSTEM, code: record.interaction },
      ],
    },
    action: record.action,
    severity: outcome === '0' ? 'informational' : outcome === '4' ? 'warning' : 'error',
    recorded: record.recorded,
    outcome: {
      code: { system: 'http://terminology.hl7.org/CodeSystem/audit-event-outcome', code: outcome },
      ...(record.status >= 400
        ? { detail: [{ text: `${record.status} ${statusText(record.status)}` }] }
        : {}),
    },
    // R5 has one patient; the entities carry each one's patient when several are involved.
    ...(patients.length === 1 ? { patient: { reference: `Patient/${patients[0]}` } } : {}),
    agent: agentsOf(record.agent, record.clientAddress),
    source: {
      observer: { display: 'casebook' },
      type: [
        {
          coding: [
            {
              system: 'http://terminology.hl7.org/CodeSystem/security-source-type',
              code: '4',
              display: 'Application Server',
            },
          ],
        },
      ],
    },
    ...(record.entities.length > 0
      ? {
          entity: record.entities.map((e) => {
            const slash = e.reference.indexOf('/');
            const type = e.reference.slice(0, slash);
            const what =
              type === 'Session'
                ? { identifier: { system: SESSION_SYSTEM, value: e.reference.slice(slash + 1) } }
                : { reference: e.reference };
            const detail = [
              // R5 AuditEvent.entity.detail has no Reference value: the patient's reference
              // travels as a string (AuditEvent.patient holds it too when there is one).
              ...(typeof e.patientId === 'number' && type !== 'Patient'
                ? [{ type: { text: 'patient' }, valueString: `Patient/${e.patientId}` }]
                : []),
              // issue 32: the version of a report an amendment or entered-in-error wrote, and why.
              ...(e.version !== undefined
                ? [{ type: { text: 'version' }, valueString: String(e.version) }]
                : []),
              ...(e.reason !== undefined ? [{ type: { text: 'reason' }, valueString: e.reason }] : []),
            ];
            return { what, ...(detail.length > 0 ? { detail } : {}) };
          }),
        }
      : {}),
  };
};

/**
 * The AuditEvent an `AuditEventRecorded` event shows: rendered from its record, or the resource a
 * log written before records carries.
 */
export const auditEventOf = (data: AuditEventRecordedData): AuditEventResource =>
  'record' in data ? toAuditEvent(data.record) : data.auditEvent;

/** One AuditEvent of the log: the resource, and what the read model keeps of it (record or resource). */
export interface LoggedAuditEvent {
  readonly resource: AuditEventResource;
  readonly content: AuditRecord | AuditEventResource;
}

/**
 * The AuditEvents an event of the log holds, in order: every record of an `AuditEventsRecorded`
 * batch, the one of an `AuditEventRecorded` event, none for any other type.
 */
export const auditEventsIn = (event: {
  readonly type: string;
  readonly data: unknown;
}): LoggedAuditEvent[] => {
  if (event.type === AUDIT_EVENTS_RECORDED)
    return (event.data as AuditEventsRecordedData).records.map((record) => ({
      resource: toAuditEvent(record),
      content: record,
    }));
  if (event.type === AUDIT_EVENT_RECORDED) {
    const data = event.data as AuditEventRecordedData;
    return [{ resource: auditEventOf(data), content: 'record' in data ? data.record : data.auditEvent }];
  }
  return [];
};
