/**
 * Who may erase a patient (docs/architecture.md "Erasure"): an API client granted system/Patient.d
 * (or system/*.d) without filters, never a session, never a read or user/patient scope.
 */
import { expect } from 'chai';
import { DomainError } from '../../src/domain/decider.js';
import { authorizeErasure, type Principal } from '../../src/fhir/access.js';
import { parseScopeList } from '../../src/fhir/scopes.js';

const principal = (kind: Principal['kind'], scopes: string): Principal => ({
  kind,
  tenantId: 1,
  actor: { type: kind === 'client' ? 'client' : 'session', id: 'x' },
  scopes: parseScopeList(scopes).scopes,
  projects: [],
  patientId: null,
  userRef: null,
});

const refused = (p: Principal): boolean => {
  try {
    authorizeErasure(p);
    return false;
  } catch (error) {
    expect(error).to.be.instanceOf(DomainError);
    expect((error as DomainError).kind).to.equal('forbidden');
    return true;
  }
};

describe('authorizeErasure', () => {
  it('grants system/Patient.d and system/*.d to an API client', () => {
    expect(refused(principal('client', 'system/Patient.d'))).to.equal(false);
    expect(refused(principal('client', 'system/*.cruds'))).to.equal(false);
  });

  it('refuses a session, read-only or non-system scopes, and another resource type', () => {
    expect(refused(principal('session', 'system/Patient.d'))).to.equal(true);
    expect(refused(principal('client', 'system/Patient.rs'))).to.equal(true);
    expect(refused(principal('client', 'user/Patient.d patient/*.cruds'))).to.equal(true);
    expect(refused(principal('client', 'system/Encounter.d'))).to.equal(true);
  });
});
