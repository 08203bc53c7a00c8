/**
 * `GET {fhir_base_url}/metadata` (issue 3): a CapabilityStatement listing exactly what the data
 * server implements, built from the same tables the router uses.
 */
import { RESOURCE_TYPES } from '../../domain/fhir/resource.js';
import { DEFINITIONS } from '../../fhir/definitions.js';
import { SEARCH_PARAMETERS } from '../../fhir/search.js';
import { SDC_OPERATIONS } from '../sdc/operations.js';

const SEARCH_TYPES: Record<string, string> = {
  id: 'token',
  token: 'token',
  patient: 'reference',
  encounter: 'reference',
};

/**
 * What casebook keeps of a resource type where it is not everything the R5 schema accepts
 * (docs/interface.md §2.5, issue 35); `Prefer: return=OperationOutcome` names what a create lost.
 */
const KEPT: Partial<Record<string, string>> = {
  Patient:
    'Stored as sent except: identifiers only with system and value; only the first name, and in it prefix, given, family and text (docs/interface.md §2.5). Prefer: return=OperationOutcome names what a create did not store.',
  ValueSet: 'Stored as sent (url, version, status, compose checked).',
};

/** The data server's own operations (its router mounts them; issue 14). */
const FHIR_OPERATIONS = [
  {
    resourceType: 'Patient',
    name: 'everything',
    definition: 'http://hl7.org/fhir/OperationDefinition/Patient-everything',
    documentation:
      'The patient compartment (Encounter, Task, QuestionnaireResponse and what they reference), paged.',
  },
];

/** The operations casebook implements, by resource type (issue 13: discoverable), with their definitions. */
const operationsOf = (type: string) =>
  [...FHIR_OPERATIONS, ...SDC_OPERATIONS]
    .filter((o) => o.resourceType === type)
    .map(({ name, definition, documentation }) => ({ name, definition, documentation }));

/**
 * Result parameters every search takes (docs/interface.md §4.3 rules 10–11; FHIR R5 search.html),
 * listed once for all resource types (`rest.searchParam`).
 */
const RESULT_PARAMETERS = [
  { name: '_count', type: 'number', documentation: 'Entries per page: default 20, at most 1,000.' },
  {
    name: '_sort',
    type: 'special',
    documentation:
      '_id, _lastUpdated and the token/uri parameters of the type; - before a name for descending.',
  },
  { name: '_total', type: 'token', documentation: 'none | estimate | accurate (the default).' },
  {
    name: '_include',
    type: 'special',
    documentation: "The references of the type's searchInclude, on each page for that page's matches.",
  },
];

/** Result parameters every search and history takes (docs/interface.md §4.3 rules 10–11). */
const PAGING_DOCUMENTATION =
  'Paging: _count (default 20, at most 1000), _sort (_id, _lastUpdated, and the token/uri parameters; - for descending), _total (none | estimate | accurate, default accurate), and opaque _cursor links (self, first, previous, next). History: _count, _since, _at.';

/** The CapabilityStatement of the server at `baseUrl`; `now` dates it. */
export const capabilityStatement = (baseUrl: string, now: Date) => ({
  resourceType: 'CapabilityStatement',
  status: 'active',
  date: now.toISOString(),
  kind: 'instance',
  software: { name: 'casebook' },
  implementation: { description: 'casebook FHIR R5 data server', url: baseUrl },
  fhirVersion: '5.0.0',
  format: ['application/fhir+json', 'json'],
  rest: [
    {
      mode: 'server',
      security: {
        description:
          'HTTP Basic client credentials (governed by the client scopes) or the auth_session cookie (governed by the session scopes, SMART v2: patient/ compartment, user/ authored).',
      },
      interaction: [{ code: 'transaction' }],
      searchParam: RESULT_PARAMETERS,
      documentation: PAGING_DOCUMENTATION,
      resource: [
        ...RESOURCE_TYPES.map((type) => {
          const def = DEFINITIONS[type];
          const search = SEARCH_PARAMETERS[type];
          return {
            type,
            versioning: 'versioned-update',
            readHistory: true,
            updateCreate: false,
            conditionalCreate: true,
            conditionalUpdate: true,
            conditionalDelete: 'not-supported',
            conditionalRead: 'not-supported',
            interaction: [
              'read',
              'vread',
              'update',
              'delete',
              'history-instance',
              'history-type',
              'create',
              'search-type',
            ].map((code) => ({ code })),
            searchParam: [...search.parameters].map(([name, p]) => ({
              name,
              type:
                p.kind === 'element'
                  ? p.type
                  : p.kind === 'indexed'
                    ? p.definition.type
                    : SEARCH_TYPES[p.kind],
            })),
            ...(search._include ? { searchInclude: search._include } : {}),
            ...(operationsOf(type).length > 0 ? { operation: operationsOf(type) } : {}),
            documentation: [
              KEPT[type] ??
                'Every element of FHIR R5 that passes the R5 schema is stored and returned as sent.',
              ...(def.partialUpdate
                ? [
                    'PUT by id is a partial update: omitted elements stay unchanged; a given identifier list replaces the old one.',
                  ]
                : []),
            ].join(' '),
          };
        }),
        {
          type: 'AuditEvent',
          documentation:
            'The audit trail (read only): one AuditEvent per access. Needs AuditEvent scopes (system/AuditEvent.rs); sessions never read it.',
          interaction: [{ code: 'read' }, { code: 'search-type' }],
          searchParam: [
            { name: 'patient', type: 'reference' },
            { name: 'entity', type: 'reference' },
            { name: 'agent', type: 'reference' },
            { name: 'date', type: 'date' },
            { name: 'action', type: 'token' },
            { name: 'outcome', type: 'token' },
          ],
        },
        {
          type: 'Subscription',
          documentation:
            'FHIR R5 topic-based subscriptions (channel rest-hook; payload empty, id-only or full-resource), for API clients with system/Subscription.* scopes. Notifications are signed (X-Casebook-Signature) with the secret shown once in the create response.',
          versioning: 'versioned',
          interaction: ['read', 'update', 'delete', 'create', 'search-type'].map((code) => ({ code })),
          searchParam: [{ name: 'status', type: 'token' }],
          operation: [
            {
              name: 'status',
              definition: 'http://hl7.org/fhir/OperationDefinition/Subscription-status',
              documentation: 'The SubscriptionStatus: status, eventsSinceSubscriptionStart, last error.',
            },
            {
              name: 'events',
              definition: 'http://hl7.org/fhir/OperationDefinition/Subscription-events',
              documentation:
                'Past notifications replayed from the log by event number (eventsSinceNumber, eventsUntilNumber, content).',
            },
          ],
        },
        {
          type: 'SubscriptionTopic',
          documentation: 'The topics casebook publishes (read only).',
          interaction: [{ code: 'read' }, { code: 'search-type' }],
        },
      ],
    },
  ],
});
