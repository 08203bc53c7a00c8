/**
 * Projection spec of `rm_resources` and `rm_resource_identifiers` (src/projections/resources.ts;
 * docs/architecture.md "Projections"): given resource events → then rows, inline (the keyed apply
 * function, called in the append), by catch-up and by rebuild, on PGlite and PostgreSQL.
 */

import { resourcesProjection } from '../../../src/projections/resources.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const AT = '2026-03-01T10:00:00.000Z';
const LATER = '2026-03-01T11:00:00.000Z';
const LAST = '2026-03-01T12:00:00.000Z';

const patient = (id: number, value: string, at: string, type = 'PatientRegistered') =>
  specEvent(`Patient-${id}`, type, {
    id,
    ...(type === 'PatientRegistered' ? { tenantId: 1 } : {}),
    resource: { identifier: [{ system: 'urn:spec', value }], birthDate: '1970-01-01' },
    at,
  });
const encounter = (id: number, patientId: number) =>
  specEvent(`Encounter-${id}`, 'EncounterRegistered', {
    id,
    tenantId: 1,
    resource: { status: 'in-progress', class: [], subject: { reference: `Patient/${patientId}` } },
    at: AT,
  });

const resources = (ids: string) =>
  `SELECT resource_type, id, tenant_id, version_id, deleted, last_updated, patient_id, encounter_id,
          content->'identifier' AS identifier, content->'meta'->>'versionId' AS meta_version
     FROM rm_resources WHERE id IN (${ids}) ORDER BY resource_type, id`;
const identifiers = (ids: string) =>
  `SELECT resource_type, tenant_id, system, value, id FROM rm_resource_identifiers
    WHERE id IN (${ids}) ORDER BY resource_type, id, value`;

for (const db of testDatabases)
  describe(`projection spec: resources on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [resourcesProjection]);

    it('a registration writes version 1 of the resource and its identifier', async () => {
      const given = spec.given(patient(301, 'mrn-301', AT));
      await given.thenRows(resources('301'), [
        {
          resource_type: 'Patient',
          id: 301,
          tenant_id: 1,
          version_id: 1,
          deleted: false,
          last_updated: AT,
          patient_id: 301,
          encounter_id: null,
          identifier: [{ system: 'urn:spec', value: 'mrn-301' }],
          meta_version: '1',
        },
      ]);
      await spec
        .given()
        .thenRows(identifiers('301'), [
          { resource_type: 'Patient', tenant_id: 1, system: 'urn:spec', value: 'mrn-301', id: 301 },
        ]);
    });

    it('an update is version 2 with the new identifier only; a deletion keeps the row, deleted', () =>
      spec
        .given(patient(302, 'old', AT), patient(303, 'gone', AT))
        .when(
          patient(302, 'new', LATER, 'PatientUpdated'),
          specEvent('Patient-303', 'PatientDeleted', { id: 303, at: LAST }),
        )
        .thenRows(
          `SELECT r.id, r.version_id, r.deleted, r.last_updated,
                  (SELECT array_agg(value ORDER BY value) FROM rm_resource_identifiers i
                    WHERE i.resource_type = 'Patient' AND i.id = r.id) AS values
             FROM rm_resources r WHERE r.resource_type = 'Patient' AND r.id IN (302, 303) ORDER BY r.id`,
          [
            { id: 302, version_id: 2, deleted: false, last_updated: LATER, values: ['new'] },
            { id: 303, version_id: 2, deleted: true, last_updated: LAST, values: null },
          ],
        ));

    it("an Encounter's patient and encounter columns come from its subject", () =>
      spec.given(patient(304, 'mrn-304', AT), encounter(305, 304)).thenRows(
        `SELECT resource_type, id, patient_id, encounter_id FROM rm_resources
            WHERE (resource_type, id) IN (('Patient', 304), ('Encounter', 305)) ORDER BY resource_type`,
        [
          { resource_type: 'Encounter', id: 305, patient_id: 304, encounter_id: 305 },
          { resource_type: 'Patient', id: 304, patient_id: 304, encounter_id: null },
        ],
      ));
  });
