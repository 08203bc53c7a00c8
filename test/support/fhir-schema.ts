/**
 * The FHIR R5 response validator of the test suites (issue 13): every FHIR resource a suite
 * receives is checked against the official R5 JSON schema (`openapi/fhir.schema.json` of the npm
 * package `hl7.fhir.r5.core` 5.0.0), with ajv, on top of the FHIR JSON rules that the schema does
 * not express (no empty arrays or objects, no nulls: {@link assertFhirJson} in `./fhir.ts`).
 *
 * The schema picks a resource's definition with a `oneOf` over all 157 resource types
 * (`ResourceList`); ajv would try each in turn and report the failures of all of them. Here
 * `ResourceList` becomes a switch on `resourceType` (an `enum` of the types, then one
 * `if`/`then` per type), which validates the same documents and names the real error. Patterns
 * are compiled without the `u` flag: the R5 `decimal` pattern has a stray `}` that only
 * non-Unicode regular expressions accept as a literal.
 */
import { createRequire } from 'node:module';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { expect } from 'chai';

const require = createRequire(import.meta.url);

interface JsonSchema {
  [key: string]: unknown;
  definitions: Record<string, Record<string, unknown>>;
}

let validator: ValidateFunction | undefined;

/** The compiled R5 schema (compiled once per process, on first use: about a second). */
const r5Validator = (): ValidateFunction => {
  if (validator) return validator;
  const schema = structuredClone(require('hl7.fhir.r5.core/openapi/fhir.schema.json')) as JsonSchema;
  const mapping = (schema.discriminator as { mapping: Record<string, string> }).mapping;
  const types = Object.keys(mapping);
  const resourceList = {
    type: 'object',
    required: ['resourceType'],
    properties: { resourceType: { enum: types } },
    allOf: types.map((type) => ({
      if: { properties: { resourceType: { const: type } } },
      // biome-ignore lint/suspicious/noThenProperty: JSON schema's if/then keyword
      then: { $ref: mapping[type] },
    })),
  };
  schema.definitions.ResourceList = resourceList;
  delete schema.oneOf;
  delete schema.discriminator;
  delete schema.id;
  const ajv = new Ajv({ strict: false, allErrors: false, validateFormats: false, unicodeRegExp: false });
  ajv.addMetaSchema(require('ajv/dist/refs/json-schema-draft-06.json'));
  validator = ajv.compile({ ...schema, $ref: '#/definitions/ResourceList' });
  return validator;
};

const describeError = (e: ErrorObject): string =>
  `${e.instancePath || '/'} ${e.message ?? 'is invalid'}${
    e.keyword === 'additionalProperties'
      ? ` (${(e.params as { additionalProperty: string }).additionalProperty})`
      : ''
  }`;

/**
 * Asserts that `resource` is a valid FHIR R5 resource by the official JSON schema.
 * @param where what answered it (e.g. `GET /Patient/1`), for the failure message.
 * @throws {AssertionError} naming the JSON pointer and the rule it breaks.
 */
export const assertR5Resource = (resource: unknown, where: string): void => {
  const validate = r5Validator();
  if (!validate(resource))
    expect.fail(
      `${where}: not a valid FHIR R5 resource: ${(validate.errors ?? [])
        .filter((e) => e.keyword !== 'if')
        .map(describeError)
        .join('; ')}`,
    );
};
