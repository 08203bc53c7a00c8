/**
 * The FHIR R5 JSON schema as the data server checks resource bodies against it (issue 35;
 * docs/interface.md §2.7): the definitions of the resource types casebook stores, extracted from
 * the npm package `hl7.fhir.r5.core` 5.0.0 (`openapi/fhir.schema.json`) into `r5/schema.generated.ts` by
 * `scripts/generate-r5-definitions.ts`. Contained resources are checked only for a
 * `resourceType` (the extract holds no other types). Patterns are compiled without the `u` flag:
 * the R5 `decimal` pattern has a stray `}` that only non-Unicode regular expressions accept.
 */
import { createRequire } from 'node:module';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { z } from 'zod';
import { schemaJson } from './r5/schema.generated.js';

const require = createRequire(import.meta.url);

let ajv: Ajv | undefined;
let definitions: Record<string, { allOf?: { 'x-choice'?: string }[] }> | undefined;
const validators = new Map<string, ValidateFunction>();

/**
 * Adds the `_element` sibling the R5 JSON format allows on every primitive element (extensions and
 * id of a primitive value) where the official schema lacks it: it leaves it out for arrays of
 * `canonical` (`Questionnaire._derivedFrom`, which the SDC IG's examples use; issue 35).
 */
interface SchemaProperty {
  $ref?: string;
  type?: string;
  items?: { $ref?: string };
  description?: string;
}
const addPrimitiveExtensions = (
  defs: Record<string, { properties?: Record<string, SchemaProperty> }>,
): void => {
  const primitive = (ref: unknown) =>
    typeof ref === 'string' &&
    /^#\/definitions\/[a-z][A-Za-z0-9]*$/.test(ref) &&
    ref !== '#/definitions/xhtml';
  for (const definition of Object.values(defs)) {
    const properties = definition.properties;
    if (!properties) continue;
    for (const [name, property] of Object.entries(properties)) {
      if (name.startsWith('_') || Object.hasOwn(properties, `_${name}`)) continue;
      if (primitive(property?.$ref))
        properties[`_${name}`] = { description: `Extensions for ${name}`, $ref: '#/definitions/Element' };
      else if (property?.type === 'array' && primitive(property.items?.$ref))
        properties[`_${name}`] = {
          description: `Extensions for ${name}`,
          type: 'array',
          items: { $ref: '#/definitions/Element' },
        };
    }
  }
};

/** The compiled validator of one resource type (compiled on first use, then kept). */
const validatorOf = (resourceType: string): ValidateFunction => {
  const known = validators.get(resourceType);
  if (known) return known;
  if (!ajv) {
    ajv = new Ajv({
      strict: false,
      allErrors: true,
      validateSchema: false,
      validateFormats: false,
      unicodeRegExp: false,
    });
    ajv.addMetaSchema(require('ajv/dist/refs/json-schema-draft-06.json'));
    const schema = JSON.parse(schemaJson);
    addPrimitiveExtensions(schema.definitions);
    definitions = schema.definitions;
    ajv.addSchema({ ...schema, $id: 'r5' });
  }
  const validate = ajv.getSchema(`r5#/definitions/${resourceType}`);
  if (!validate) throw new Error(`no R5 schema definition for ${resourceType}`);
  validators.set(resourceType, validate);
  return validate;
};

/** The required choice (`occurrence[x]`) an `anyOf` error of the type's own schema stands for. */
const choiceOf = (resourceType: string, e: ErrorObject): string | undefined => {
  const at = e.keyword === 'anyOf' ? /^#\/allOf\/(\d+)\/anyOf$/.exec(e.schemaPath) : null;
  return at ? definitions?.[resourceType]?.allOf?.[Number(at[1])]?.['x-choice'] : undefined;
};

/** The path of an ajv error as zod path segments (`/code/coding/0` → ['code', 'coding', 0]). */
const pathOf = (e: ErrorObject): (string | number)[] => [
  ...e.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s)),
  ...(e.keyword === 'additionalProperties'
    ? [(e.params as { additionalProperty: string }).additionalProperty]
    : e.keyword === 'required'
      ? [(e.params as { missingProperty: string }).missingProperty]
      : []),
];

const messageOf = (e: ErrorObject): string =>
  e.keyword === 'additionalProperties'
    ? 'is not an element of this type in FHIR R5'
    : e.keyword === 'required'
      ? 'is required'
      : e.keyword === 'enum'
        ? `must be one of ${((e.params as { allowedValues: unknown[] }).allowedValues ?? []).join(', ')}`
        : (e.message ?? 'is invalid');

/**
 * The problems of `body` as a FHIR R5 `resourceType` resource, as zod issues (one per problem,
 * none when it is valid), for the 422 every resource body gets (src/fhir/resources.ts
 * `parseResource`). A required element (min 1 in the type's StructureDefinition) missing is one
 * issue naming it, a required choice one naming `value[x]`; `oneOf`/`if` noise that only restates
 * another problem is left out.
 * @param options.partial a partial update (docs/interface.md §4.3 rule 3): missing elements stay
 *   as stored, so none is required.
 * @throws {Error} when the extract holds no definition of the type (a programming error).
 */
export const r5SchemaIssues = (
  resourceType: string,
  body: unknown,
  options: { partial?: boolean } = {},
): z.core.$ZodIssue[] => {
  const validate = validatorOf(resourceType);
  if (validate(body)) return [];
  const seen = new Set<string>();
  const issues = (validate.errors ?? []).flatMap((e): z.core.$ZodIssue[] => {
    if (e.keyword === 'oneOf' || e.keyword === 'if') return [];
    const choice = choiceOf(resourceType, e);
    if (e.keyword === 'anyOf' && !choice) return [];
    // The forms of a required choice each report themselves missing: the anyOf names the choice.
    if (e.keyword === 'required' && /\/allOf\/\d+\/anyOf\//.test(e.schemaPath)) return [];
    if (options.partial && (e.keyword === 'required' || choice)) return [];
    const path = choice ? [choice] : pathOf(e);
    const message = choice ? 'is required' : messageOf(e);
    // One issue per element: a wrong type also fails the element's pattern or enum.
    const key = JSON.stringify(path);
    if (seen.has(key)) return [];
    seen.add(key);
    return [{ code: 'custom', path, message, input: undefined }];
  });
  return issues.length > 0 || options.partial
    ? issues
    : [{ code: 'custom', path: [], message: `is not a valid ${resourceType}`, input: undefined }];
};
