/**
 * Read model of the clinical resources the session interface registers (Patient, Encounter,
 * Practitioner): `rm_resources` (one row per resource) and `rm_resource_identifiers` (search by
 * identifier). The FHIR data server (issue 3) grows it.
 */

import type { Sql } from '../db/sql.js';
import type { EncounterEvent } from '../domain/clinical/encounter.js';
import type { Identifier } from '../domain/clinical/identifier.js';
import type { PatientEvent } from '../domain/clinical/patient.js';
import type { PractitionerEvent } from '../domain/clinical/practitioner.js';
import type { Projection } from './projection.js';
import { bumpSequence } from './sequences.js';

const insertResource = async (
  tx: Sql,
  resourceType: 'Patient' | 'Encounter' | 'Practitioner',
  id: number,
  tenantId: number,
  identifier: readonly Identifier[],
  content: Record<string, unknown>,
  at: string,
  revision: bigint,
) => {
  await tx.query(
    `INSERT INTO rm_resources (resource_type, id, tenant_id, version_id, content, last_updated, deleted)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6, false) ON CONFLICT (resource_type, id) DO NOTHING`,
    [resourceType, id, tenantId, Number(revision) + 1, JSON.stringify({ identifier, ...content }), at],
  );
  for (const { system, value } of identifier)
    await tx.query(
      `INSERT INTO rm_resource_identifiers (resource_type, tenant_id, system, value, id) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT DO NOTHING`,
      [resourceType, tenantId, system, value, id],
    );
  await bumpSequence(tx, resourceType, id);
};

export const clinicalResourcesProjection: Projection = {
  name: 'clinical_resources',
  tables: ['rm_resources', 'rm_resource_identifiers'],
  migrate: (sql) =>
    sql.exec(`CREATE TABLE IF NOT EXISTS rm_resources (
      resource_type text NOT NULL,
      id integer NOT NULL,
      tenant_id integer NOT NULL,
      version_id integer NOT NULL,
      content jsonb NOT NULL,
      last_updated timestamptz NOT NULL,
      deleted boolean NOT NULL,
      PRIMARY KEY (resource_type, id)
    );
    CREATE TABLE IF NOT EXISTS rm_resource_identifiers (
      resource_type text NOT NULL,
      tenant_id integer NOT NULL,
      system text NOT NULL,
      value text NOT NULL,
      id integer NOT NULL,
      PRIMARY KEY (resource_type, tenant_id, system, value, id)
    );`),
  apply: async (event, tx) => {
    const e = { type: event.type, data: event.data } as PatientEvent | EncounterEvent | PractitionerEvent;
    switch (e.type) {
      case 'PatientRegistered':
        return insertResource(
          tx,
          'Patient',
          e.data.patientId,
          e.data.tenantId,
          e.data.identifier,
          {},
          e.data.at,
          event.revision,
        );
      case 'EncounterRegistered':
        return insertResource(
          tx,
          'Encounter',
          e.data.encounterId,
          e.data.tenantId,
          e.data.identifier,
          { subject: { reference: `Patient/${e.data.subjectPatientId}` } },
          e.data.at,
          event.revision,
        );
      case 'PractitionerRegistered':
        return insertResource(
          tx,
          'Practitioner',
          e.data.practitionerId,
          e.data.tenantId,
          e.data.identifier,
          {},
          e.data.at,
          event.revision,
        );
      default:
        return;
    }
  },
};
