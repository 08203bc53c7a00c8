/** An API client's principal (src/http/fhir/principal.ts): its scopes parsed once per distinct client scopes. */
import { expect } from 'chai';
import { clientPrincipal } from '../../../src/http/fhir/principal.js';

describe('clientPrincipal', () => {
  const client = (scopes: string[], projects: string[] = ['oncology']) => ({
    clientId: 'c',
    tenantId: 1,
    scopes,
    projects,
  });

  it('parses a client scope set once and shares it, frozen, between requests', () => {
    const a = clientPrincipal(client(['system/*.*']));
    const b = clientPrincipal(client(['system/*.*']));
    expect(b.scopes).to.equal(a.scopes);
    expect(a.scopes.map((s) => s.resourceType)).to.deep.equal(['*', 'Questionnaire']);
    expect(a.scopes[1]?.filters).to.deep.equal([['project', 'oncology']]);
    expect(Object.isFrozen(a.scopes)).to.equal(true);
    expect(() => (a.scopes[0]?.permissions as string[]).push('d')).to.throw(TypeError);
    expect(() => (a.scopes[1]?.filters[0] as string[]).splice(0, 1)).to.throw(TypeError);
  });

  it('gives narrowed scopes or other projects their own parse (a changed client is another key)', () => {
    const wide = clientPrincipal(client(['system/*.*']));
    const narrow = clientPrincipal(client(['system/Patient.r']));
    expect(narrow.scopes).not.to.equal(wide.scopes);
    expect(narrow.scopes.map((s) => [s.resourceType, s.permissions.join('')])).to.deep.equal([
      ['Patient', 'r'],
    ]);
    const other = clientPrincipal(client(['system/*.*'], ['cardiology']));
    expect(other.scopes[1]?.filters).to.deep.equal([['project', 'cardiology']]);
    // A scope list and a project list that join to the same text are still told apart.
    const a = clientPrincipal(client(['system/Patient.r', 'system/Task.r'], []));
    const b = clientPrincipal(client(['system/Patient.r'], ['system/Task.r']));
    expect(a.scopes.map((s) => s.resourceType)).to.deep.equal(['Patient', 'Task']);
    expect(b.scopes.map((s) => s.resourceType)).to.deep.equal(['Patient']);
  });
});
