/**
 * What the interop suites share (issue 13): a populated data server to page through, and the
 * checks each client library's results must pass.
 */
import { expect } from 'chai';
import type { TestApp } from '../support/app.js';
import { assertFhirJson, fhir } from '../support/fhir.js';
import { assertR5Resource } from '../support/fhir-schema.js';

/** Asserts what a client library handed back is valid FHIR R5 JSON (schema and JSON rules). */
export const assertValid = (resource: unknown, where: string): void => {
  assertFhirJson(resource, where);
  assertR5Resource(resource, where);
};

/** Creates `count` Patients under `system` through the API (as the general client); their ids in order. */
export const createPatients = async (app: TestApp, system: string, count: number): Promise<string[]> => {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await fhir(app, 'POST', '/Patient', {
      body: {
        resourceType: 'Patient',
        identifier: [{ system, value: `p-${i}` }],
        name: [{ family: 'Pager' }],
      },
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    ids.push(res.body.id as string);
  }
  return ids;
};

/**
 * Asserts the ids a client read while paging hold each of `created` exactly once, in order, and
 * no id twice.
 */
export const expectEachOnce = (seen: readonly string[], created: readonly string[]): void => {
  expect(new Set(seen).size, 'no resource repeated across pages').to.equal(seen.length);
  expect(seen.filter((id) => created.includes(id))).to.deep.equal([...created]);
};
