/**
 * The one parser of literal references (`Type/<id>`): relative, absolute (`…/Type/<id>`) and
 * versioned (`…/_history/<vid>`) forms where the caller allows them; 32-bit ids only; no regular
 * expression is built from the type.
 */
import { expect } from 'chai';
import { idInReference, referenceId } from '../../src/fhir/references.js';

describe('idInReference', () => {
  const cases: [string, Parameters<typeof idInReference>[2], number | undefined][] = [
    ['Patient/12', {}, 12],
    ['Patient/12', { absolute: true, version: true }, 12],
    ['Encounter/12', {}, undefined],
    ['http://h/fhir/r5/Patient/12', {}, undefined],
    ['http://h/fhir/r5/Patient/12', { absolute: true }, 12],
    ['Patient/12/_history/3', {}, undefined],
    ['Patient/12/_history/3', { version: true }, 12],
    ['http://h/fhir/r5/Patient/12/_history/3', { absolute: true, version: true }, 12],
    ['http://h/fhir/r5/Patient/12/_history/3', { version: true }, undefined],
    ['Patient/2147483648', {}, undefined],
    ['Patient/12345678901', {}, undefined],
    ['Patient/-1', {}, undefined],
    ['Patient/', {}, undefined],
    ['Patient', {}, undefined],
    ['XPatient/12', { absolute: true }, undefined],
    ['', {}, undefined],
  ];
  for (const [ref, forms, id] of cases)
    it(`${JSON.stringify(ref)} ${JSON.stringify(forms)} → ${id}`, () => {
      expect(idInReference(ref, 'Patient', forms)).to.equal(id);
    });

  it('takes the reference out of a Reference, and refuses a huge hostile one', () => {
    expect(referenceId({ reference: 'Patient/7' }, 'Patient')).to.equal(7);
    expect(referenceId({ display: 'x' }, 'Patient')).to.equal(undefined);
    expect(referenceId('Patient/7', 'Patient')).to.equal(undefined);
    expect(idInReference(`${'/'.repeat(1_000_000)}Patient/x`, 'Patient', { absolute: true })).to.equal(
      undefined,
    );
  });
});
