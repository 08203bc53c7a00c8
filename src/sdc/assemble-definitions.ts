/**
 * `$assemble` of items that carry `definition` (issue 35; docs/interface.md §4.4 `$assemble`; SDC
 * IG "Modular Forms" — Data Element-based Questionnaires and Questionnaire Library Referencing):
 * an item's `definition` `<canonical>#<fragment>` names an ElementDefinition of a StructureDefinition
 * (`…/StructureDefinition/X#X.a.b`, by element id) or an item of another Questionnaire
 * (`…/Questionnaire/Y#linkId`). What the item lacks comes from there; what it has stays, with a
 * warning where the definition says otherwise.
 *
 * From an ElementDefinition (R5 "Questionnaire.item.definition" mapping): `label` → text, `code` →
 * code, `min` ≥ 1 → required, `max` ≠ 1 → repeats, `maxLength`, `binding.valueSet` →
 * answerValueSet, `minValue[x]`/`maxValue[x]` → the minValue/maxValue extensions, the first type's
 * `regex` extension and the element's own extensions (by url, an Expression's also by name). From
 * a Questionnaire item: text, prefix, code, required, repeats, readOnly, maxLength, answerOption,
 * answerValueSet, initial, its extensions, and its child items when the item has none.
 *
 * Severities: a definition whose resource resolves but whose element or item does not is an error
 * (SDC). One that does not resolve is a warning, which says when the item is left without text or
 * answer list — SDC makes that an error, but casebook stores no StructureDefinitions (the resolver
 * finds them only where the caller supplies them), so it would refuse every data-element form,
 * the IG's own modular example among them. Generating a group's questions from an element's
 * children is not done (a warning says so).
 */
import { arrayOf, EXT_ANSWER_EXPRESSION, extensionsOf, isObject } from './engine/extensions.js';
import type { DefinitionResolver, Extension, Json, OperationOutcomeIssue } from './types.js';

const CORE = 'http://hl7.org/fhir/StructureDefinition/';

/** What applying the definitions found: errors fail the assembly, warnings go in its outcome. */
export interface DefinitionFindings {
  readonly errors: OperationOutcomeIssue[];
  readonly warnings: OperationOutcomeIssue[];
}

const issue = (severity: 'error' | 'warning', code: string, diagnostics: string, expression: string) => ({
  severity,
  code,
  diagnostics,
  expression: [expression],
});

/** `[key, value]` of a `minValue[x]`-style element property (`minValueDate`), with its `_` sibling. */
const choiceOf = (
  element: Json,
  prefix: string,
): { key: string; value: unknown; meta: unknown } | undefined => {
  const key = Object.keys(element).find((k) => k.startsWith(prefix) && k.length > prefix.length);
  const underscored = Object.keys(element).find((k) => k.startsWith(`_${prefix}`));
  if (key === undefined && underscored === undefined) return undefined;
  const suffix = (key ?? underscored!.slice(1)).slice(prefix.length);
  return {
    key: `value${suffix}`,
    value: key ? element[key] : undefined,
    meta: underscored ? element[underscored] : undefined,
  };
};

/** The same extension: by url, and an Expression's by its name too. */
const sameExtension = (a: Extension, b: Extension): boolean =>
  a.url === b.url &&
  (!isObject(a.valueExpression) ||
    !isObject(b.valueExpression) ||
    (a.valueExpression as Json).name === (b.valueExpression as Json).name);

/** The item properties an ElementDefinition gives (R5 Questionnaire.item.definition mapping). */
const fromElement = (element: Json): { properties: Json; extensions: Extension[]; hasChildren: boolean } => {
  const properties: Json = {};
  if (typeof element.label === 'string') properties.text = element.label;
  if (Array.isArray(element.code) && element.code.length > 0) properties.code = element.code;
  if (typeof element.min === 'number' && element.min >= 1) properties.required = true;
  if (typeof element.max === 'string' && element.max !== '1' && element.max !== '0')
    properties.repeats = true;
  if (typeof element.maxLength === 'number') properties.maxLength = element.maxLength;
  const binding = isObject(element.binding) ? element.binding : undefined;
  if (typeof binding?.valueSet === 'string') properties.answerValueSet = binding.valueSet;
  const extensions: Extension[] = [];
  for (const [prefix, url] of [
    ['minValue', `${CORE}minValue`],
    ['maxValue', `${CORE}maxValue`],
  ] as const) {
    const choice = choiceOf(element, prefix);
    if (choice)
      extensions.push({
        url,
        ...(choice.value !== undefined ? { [choice.key]: choice.value } : {}),
        ...(choice.meta !== undefined ? { [`_${choice.key}`]: choice.meta } : {}),
      } as Extension);
  }
  for (const type of arrayOf<Json>(element.type).slice(0, 1))
    for (const ext of arrayOf<Extension>(type.extension))
      if (isObject(ext) && ext.url === `${CORE}regex`) extensions.push(ext);
  for (const ext of arrayOf<Extension>(element.extension))
    if (isObject(ext) && typeof ext.url === 'string') extensions.push(ext);
  return { properties, extensions, hasChildren: false };
};

const QUESTIONNAIRE_ITEM_PROPERTIES = [
  'text',
  'prefix',
  'code',
  'required',
  'repeats',
  'readOnly',
  'maxLength',
  'answerOption',
  'answerValueSet',
  'initial',
] as const;

/** The item properties another Questionnaire's item gives (SDC Questionnaire Library Referencing). */
const fromItem = (item: Json): { properties: Json; extensions: Extension[]; children: unknown } => {
  const properties: Json = {};
  for (const key of QUESTIONNAIRE_ITEM_PROPERTIES) if (item[key] !== undefined) properties[key] = item[key];
  return { properties, extensions: arrayOf<Extension>(item.extension).filter(isObject), children: item.item };
};

/** The item of `linkId` anywhere in `items`. */
const findItem = (items: unknown, linkId: string): Json | undefined => {
  for (const item of arrayOf<Json>(items)) {
    if (!isObject(item)) continue;
    if (item.linkId === linkId) return item;
    const inner = findItem(item.item, linkId);
    if (inner) return inner;
  }
  return undefined;
};

/** The ElementDefinition of `id` in a StructureDefinition's snapshot, else its differential. */
const findElement = (structure: Json, id: string): { element: Json; hasChildren: boolean } | undefined => {
  for (const view of ['snapshot', 'differential']) {
    const elements = arrayOf<Json>(isObject(structure[view]) ? (structure[view] as Json).element : undefined);
    const element = elements.find((e) => isObject(e) && (e.id === id || e.path === id));
    if (element)
      return {
        element,
        hasChildren: elements.some(
          (e) => isObject(e) && typeof e.id === 'string' && e.id.startsWith(`${id}.`),
        ),
      };
  }
  return undefined;
};

const CODED = ['coding', 'choice', 'open-choice'];

/**
 * Fills every item of `items` (recursively) from its `definition` (see the module comment).
 * @param items the assembled items (changed in place: a copy the caller owns).
 * @param path the FHIRPath of `items`' owner (`Questionnaire`).
 * @returns the errors and warnings, each naming `<item path>.definition`.
 */
export const applyDefinitions = async (
  items: unknown,
  resolve: DefinitionResolver,
  path = 'Questionnaire',
): Promise<DefinitionFindings> => {
  const findings: DefinitionFindings = { errors: [], warnings: [] };
  const cache = new Map<string, Promise<Json | undefined>>();
  const lookup = (type: 'Questionnaire' | 'StructureDefinition', canonical: string) => {
    const key = `${type} ${canonical}`;
    if (!cache.has(key))
      cache.set(
        key,
        resolve(type, canonical).catch(() => undefined),
      );
    return cache.get(key)!;
  };
  const visit = async (list: unknown, parent: string): Promise<void> => {
    for (const [index, item] of arrayOf<Json>(list).entries()) {
      if (!isObject(item)) continue;
      const at = `${parent}.item[${index}]`;
      if (typeof item.definition === 'string') await apply(item, at);
      await visit(item.item, at);
    }
  };
  const apply = async (item: Json, at: string): Promise<void> => {
    const definition = item.definition as string;
    const where = `${at}.definition`;
    const hash = definition.indexOf('#');
    if (hash <= 0 || hash === definition.length - 1) {
      findings.warnings.push(
        issue(
          'warning',
          'informational',
          `the definition ${definition} names no element (#…); nothing is taken from it`,
          where,
        ),
      );
      return;
    }
    const canonical = definition.slice(0, hash);
    const fragment = definition.slice(hash + 1);
    const structure = /\/StructureDefinition\/[^/]+$/.test(canonical.split('|')[0]!)
      ? await lookup('StructureDefinition', canonical)
      : undefined;
    const library = structure ? undefined : await lookup('Questionnaire', canonical);
    let source:
      | { properties: Json; extensions: Extension[]; children?: unknown; hasChildren?: boolean }
      | undefined;
    if (structure) {
      const found = findElement(structure, fragment);
      if (!found) {
        findings.errors.push(
          issue(
            'error',
            'not-found',
            `the definition ${definition}: StructureDefinition ${canonical} has no element ${fragment}`,
            where,
          ),
        );
        return;
      }
      source = { ...fromElement(found.element), hasChildren: found.hasChildren };
    } else if (library) {
      const found = findItem(library.item, fragment);
      if (!found) {
        findings.errors.push(
          issue(
            'error',
            'not-found',
            `the definition ${definition}: Questionnaire ${canonical} has no item ${fragment}`,
            where,
          ),
        );
        return;
      }
      source = fromItem(found);
    }
    if (!source) {
      const coded = CODED.includes(String(item.type));
      const unusable =
        typeof item.text !== 'string' ||
        (coded &&
          arrayOf(item.answerOption).length === 0 &&
          item.answerValueSet === undefined &&
          extensionsOf(item, EXT_ANSWER_EXPRESSION).length === 0);
      findings.warnings.push(
        issue(
          'warning',
          unusable ? 'incomplete' : 'informational',
          `the definition ${definition} could not be resolved (casebook holds no StructureDefinitions; a Questionnaire must be readable in the tenant)${unusable ? `, and item '${String(item.linkId)}' is left without ${typeof item.text !== 'string' ? 'text' : 'an answer list'}` : '; the item is used as it is'}`,
          where,
        ),
      );
      return;
    }
    for (const [key, value] of Object.entries(source.properties)) {
      if (item[key] === undefined) item[key] = structuredClone(value);
      else if (JSON.stringify(item[key]) !== JSON.stringify(value))
        findings.warnings.push(
          issue(
            'warning',
            'informational',
            `item '${String(item.linkId)}' keeps its own ${key}; its definition ${definition} says ${JSON.stringify(value).slice(0, 120)}`,
            where,
          ),
        );
    }
    const own = arrayOf<Extension>(item.extension).filter(isObject);
    const added = source.extensions.filter((ext) => !own.some((o) => sameExtension(o, ext)));
    if (added.length > 0) item.extension = [...own, ...added.map((e) => structuredClone(e))];
    const children = arrayOf<Json>(item.item).filter((c) => isObject(c) && c.type !== 'display');
    if (source.children !== undefined && arrayOf(item.item).length === 0)
      item.item = structuredClone(source.children);
    else if (source.hasChildren && item.type === 'group' && children.length === 0)
      findings.warnings.push(
        issue(
          'warning',
          'not-supported',
          `group '${String(item.linkId)}': questions are not generated from the children of ${definition}; add them as items`,
          where,
        ),
      );
  };
  await visit(items, path);
  return findings;
};
