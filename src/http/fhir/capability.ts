/**
 * `GET {fhir_base_url}/metadata` (issue 3): a CapabilityStatement listing exactly what the data
 * server implements, built from the same tables the router uses.
 */
import { RESOURCE_TYPES } from '../../domain/fhir/resource.js';
import { DEFINITIONS } from '../../fhir/definitions.js';
import { SEARCH_PARAMETERS } from '../../fhir/search.js';

const SEARCH_TYPES: Record<string, string> = {
  id: 'token',
  token: 'token',
  patient: 'reference',
  encounter: 'reference',
};

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
      resource: RESOURCE_TYPES.map((type) => {
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
          interaction: ['read', 'vread', 'update', 'delete', 'history-instance', 'create', 'search-type'].map(
            (code) => ({ code }),
          ),
          searchParam: Object.entries(search.parameters).map(([name, p]) => ({
            name,
            type: p.kind === 'element' ? p.type : SEARCH_TYPES[p.kind],
          })),
          ...(search._include ? { searchInclude: search._include } : {}),
          ...(def.partialUpdate
            ? {
                documentation:
                  'PUT by id is a partial update: omitted elements stay unchanged; a given identifier list replaces the old one.',
              }
            : {}),
        };
      }),
    },
  ],
});
