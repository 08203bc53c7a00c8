/**
 * The projections' folds, pure (issue 34 "Tests in tiers"): given events → then the rows a batch
 * leaves, without a database. What the apply functions then write is tested on both SQL stores in
 * test/projections/projections.test.ts.
 */
import { expect } from 'chai';
import { foldBatch } from '../../src/projections/resources.js';
import { foldSessions } from '../../src/projections/sessions.js';
import { testRecordedEvent } from '../support/events.js';

const created = {
  sessionId: 7,
  tenantId: 1,
  clientId: 'ehr',
  userId: 3,
  patientId: 4,
  encounterId: null,
  scopes: ['patient/*.rs'],
  deploymentMode: 'embedded',
  postSubmitRedirect: null,
  postCancelRedirect: null,
  handoverTokenHash: 'h',
  handoverExpiresAt: '2026-03-01T10:05:00.000Z',
  createdAt: '2026-03-01T10:00:00.000Z',
  expiresAt: '2026-03-01T18:00:00.000Z',
};

describe('projection folds (pure)', () => {
  it('sessions: a creation, a handover and an end leave one ended row with the creation', () => {
    const rows = foldSessions([
      testRecordedEvent('SessionCreated', 'session-7', 0, created),
      testRecordedEvent('SessionHandedOver', 'session-7', 1, {
        sessionId: 7,
        cookieHash: 'c',
        at: '2026-03-01T10:01:00.000Z',
      }),
      testRecordedEvent('SessionEnded', 'session-7', 2, { sessionId: 7, at: '2026-03-01T10:02:00.000Z' }),
    ]);
    expect(rows).to.deep.equal([
      {
        id: 7,
        revision: 2,
        created,
        status: 'ended',
        cookie_hash: null,
        last_modified_at: '2026-03-01T10:02:00.000Z',
      },
    ]);
  });

  it('sessions: an event delivered again below the revision the batch holds changes nothing', () => {
    const handedOver = testRecordedEvent('SessionHandedOver', 'session-7', 1, {
      sessionId: 7,
      cookieHash: 'c',
      at: '2026-03-01T10:01:00.000Z',
    });
    const rows = foldSessions([handedOver, testRecordedEvent('SessionCreated', 'session-7', 0, created)]);
    expect(rows).to.have.length(1);
    expect(rows[0]).to.include({ revision: 1, status: 'active', cookie_hash: 'c', created: null });
  });

  it('resources: a creation, an update and a deletion leave the deleted row at version 3 with the last content', () => {
    const rows = foldBatch([
      testRecordedEvent('PatientRegistered', 'Patient-5', 0, {
        id: 5,
        tenantId: 1,
        resource: { resourceType: 'Patient', identifier: [{ system: 'urn:s', value: 'A' }] },
        at: '2026-03-01T10:00:00.000Z',
      }),
      testRecordedEvent('PatientUpdated', 'Patient-5', 1, {
        id: 5,
        resource: { resourceType: 'Patient', gender: 'female' },
        at: '2026-03-01T10:01:00.000Z',
      }),
      testRecordedEvent('PatientDeleted', 'Patient-5', 2, { id: 5, at: '2026-03-01T10:02:00.000Z' }),
      testRecordedEvent('SessionEnded', 'session-7', 3, { sessionId: 7, at: '2026-03-01T10:02:00.000Z' }),
    ]);
    expect(rows).to.have.length(1);
    expect(rows[0]).to.deep.include({
      resource_type: 'Patient',
      id: 5,
      tenant_id: 1,
      version_id: 3,
      deleted: true,
      created: true,
      last_updated: '2026-03-01T10:02:00.000Z',
      identifiers: [],
      patient_id: 5,
    });
    expect(rows[0]!.content).to.deep.include({ resourceType: 'Patient', id: '5', gender: 'female' });
    expect(rows[0]!.content?.meta).to.deep.include({ versionId: '2' });
  });
});
