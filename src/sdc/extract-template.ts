/**
 * Template-based `$extract` (SDC 4.0 "Template-based extraction",
 * http://hl7.org/fhir/uv/sdc/extraction.html#template-based-extraction; issue 35;
 * docs/interface.md §4.5): resources written as contained templates of the Questionnaire, filled
 * from the response by FHIRPath.
 *
 * - `sdc-questionnaire-templateExtract` (root or item; sub-extensions `template` = `#id` of a
 *   contained resource, `fullUrl`, `resourceId`, `ifNoneExist`, `ifMatch`, `ifNoneMatch`,
 *   `ifModifiedSince` as FHIRPath): one entry per instance of the item in the response (per
 *   repetition, inside repeating groups too), or one for the root.
 * - `sdc-questionnaire-templateExtractContext` on a template element: the element is repeated for
 *   each result of the expression, its children evaluated on that result (and `%<name>` bound to it
 *   when the expression is named); no result removes the element.
 * - `sdc-questionnaire-templateExtractValue` on an element (on `_element` for a primitive): the
 *   element takes the results (one per array entry for a repeating element); no result removes it.
 * - `sdc-questionnaire-templateExtractBundle` (root): a contained Bundle template, processed the same
 *   way, becomes the result Bundle.
 * - `sdc-questionnaire-extractAllocateId` (root, or item: one per instance): `%<name>` is a new
 *   uuid, the same wherever it is used. A `fullUrl` that evaluates to a bare uuid becomes
 *   `urn:uuid:<uuid>`, and a reference `Type/<uuid>` to an entry of that type with that fullUrl
 *   becomes `urn:uuid:<uuid>`, so the Bundle can be POSTed to casebook's transaction endpoint as it
 *   is (casebook assigns the ids: an allocated `resourceId` is a POST, not a PUT of that id).
 *
 * Expressions are evaluated on the response item that carries `templateExtract` (the response for
 * the root), with `%resource` the response and `%questionnaire` the form. Pure apart from the
 * caller's `uuid` function; what cannot be extracted is reported through `warn`, never thrown.
 */
import type { EvaluationBudget } from './budget.js';
import { evaluateFhirPathTyped, type FhirPathEnv, FhirPathError, type TypedValue } from './fhirpath.js';
import type {
  Extension,
  Json,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from './types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition';
export const TEMPLATE_EXTRACT = `${SDC}/sdc-questionnaire-templateExtract`;
export const TEMPLATE_EXTRACT_BUNDLE = `${SDC}/sdc-questionnaire-templateExtractBundle`;
export const TEMPLATE_EXTRACT_CONTEXT = `${SDC}/sdc-questionnaire-templateExtractContext`;
export const TEMPLATE_EXTRACT_VALUE = `${SDC}/sdc-questionnaire-templateExtractValue`;
export const EXTRACT_ALLOCATE_ID = `${SDC}/sdc-questionnaire-extractAllocateId`;

/** The request-level sub-extensions of templateExtract and the Bundle.entry.request element each sets. */
const REQUEST_PARTS = ['ifNoneExist', 'ifMatch', 'ifNoneMatch', 'ifModifiedSince'] as const;
/** Request elements casebook's transaction endpoint acts on (src/commands/transaction.ts). */
const HONOURED_REQUEST_PARTS = new Set(['ifNoneExist', 'ifMatch']);
const TEMPLATE_PARTS = new Set(['template', 'fullUrl', 'resourceId', 'type', ...REQUEST_PARTS]);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface TemplateExtractInput {
  readonly response: QuestionnaireResponse;
  readonly questionnaire: Questionnaire;
  /** A uuid (bare, lower case) for `key`: the same key always gives the same uuid. */
  readonly uuid: (key: string) => string;
  /** Records an issue (severity warning). */
  readonly warn: (diagnostics: string, expression?: string, code?: string) => void;
  readonly now?: Date;
  readonly budget?: EvaluationBudget;
}

export interface TemplateExtractOutput {
  /** Bundle entries (fullUrl, resource, request) in the order of the response. */
  readonly entries: Json[];
  /** The processed templateExtractBundle, without its entries (they are in `entries`), if any. */
  readonly bundle?: Json;
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const arrayOf = <T>(value: unknown): T[] => (Array.isArray(value) ? (value.filter(isObject) as T[]) : []);
const extensionsOf = (element: unknown, url: string): Extension[] =>
  isObject(element) ? arrayOf<Extension>(element.extension).filter((e) => e.url === url) : [];
const subExtension = (extension: Extension, url: string): Extension | undefined =>
  arrayOf<Extension>(extension.extension).find((e) => e.url === url);

/** Whether a Questionnaire uses template-based extraction anywhere. */
export const usesTemplateExtraction = (questionnaire: Questionnaire): boolean => {
  const visit = (element: unknown): boolean =>
    extensionsOf(element, TEMPLATE_EXTRACT).length > 0 ||
    extensionsOf(element, TEMPLATE_EXTRACT_BUNDLE).length > 0 ||
    (isObject(element) && arrayOf(element.item).some(visit));
  return visit(questionnaire);
};

/** An expression of a template extension: valueString, or a text/fhirpath valueExpression. */
interface TemplateExpression {
  readonly expression: string;
  readonly name?: string;
}

/** Where expressions start: a node (plain JSON or fhirpath.js's) and its model path. */
interface Focus {
  readonly node: unknown;
  readonly base?: string;
}

/**
 * Runs template-based extraction (see the module comment).
 * @returns the entries and the processed Bundle template; problems are reported through `warn`.
 */
export const extractFromTemplates = (input: TemplateExtractInput): TemplateExtractOutput => {
  const { response, questionnaire, warn } = input;
  const contained = new Map<string, { resource: Json; index: number }>();
  arrayOf<Json>(questionnaire.contained).forEach((resource, index) => {
    if (typeof resource.id === 'string') contained.set(resource.id, { resource, index });
  });
  const entries: Json[] = [];
  /** Allocated uuids; a `Type/<uuid>` reference to one of their entries becomes `urn:uuid:`. */
  const allocated = new Set<string>();

  const expressionOf = (extension: Extension, where: string): TemplateExpression | undefined => {
    if (typeof extension.valueString === 'string') return { expression: extension.valueString };
    const expression = extension.valueExpression;
    if (isObject(expression) && typeof expression.expression === 'string') {
      if (expression.language !== undefined && expression.language !== 'text/fhirpath') {
        warn(
          `${extension.url.split('/').pop()}: only text/fhirpath expressions are supported, not ${String(expression.language)}`,
          where,
        );
        return undefined;
      }
      return {
        expression: expression.expression,
        ...(typeof expression.name === 'string' ? { name: expression.name } : {}),
      };
    }
    warn(
      `${extension.url.split('/').pop()} without an expression (valueString or valueExpression)`,
      where,
      'invalid',
    );
    return undefined;
  };

  const evaluate = (
    focus: Focus,
    expression: string,
    env: FhirPathEnv,
    where: string,
  ): TypedValue[] | undefined => {
    try {
      return evaluateFhirPathTyped(
        focus.node,
        expression,
        { ...env, resource: response, questionnaire },
        {
          ...(focus.base ? { base: focus.base } : {}),
          ...(input.now ? { now: input.now } : {}),
          ...(input.budget ? { budget: input.budget } : {}),
        },
      );
    } catch (error) {
      const message = error instanceof FhirPathError ? error.message : String(error);
      warn(`'${expression}' failed: ${message}`, where, 'processing');
      return undefined;
    }
  };

  // ---- the template walk --------------------------------------------------------------------

  /** A template element without the template extensions (an emptied `extension` removed). */
  const withoutTemplateExtensions = (element: Json): Json => {
    const { extension, ...rest } = element;
    const kept = arrayOf<Extension>(extension).filter(
      (e) => e.url !== TEMPLATE_EXTRACT_CONTEXT && e.url !== TEMPLATE_EXTRACT_VALUE,
    );
    return kept.length > 0 ? { ...rest, extension: kept } : rest;
  };

  /** A complex element: 0..n copies (templateExtractContext), or the values of templateExtractValue. */
  const processElement = (element: Json, focus: Focus, env: FhirPathEnv, where: string): Json[] => {
    const context = extensionsOf(element, TEMPLATE_EXTRACT_CONTEXT)[0];
    if (context) {
      const expression = expressionOf(context, where);
      if (!expression) return [];
      const results = evaluate(focus, expression.expression, env, where) ?? [];
      const inner = {
        ...element,
        extension: arrayOf<Extension>(element.extension).filter((e) => e !== context),
      };
      return results.flatMap((result) =>
        processElement(
          inner,
          { node: result.raw },
          expression.name ? { ...env, [expression.name]: result.raw } : env,
          where,
        ),
      );
    }
    const value = extensionsOf(element, TEMPLATE_EXTRACT_VALUE)[0];
    if (value) {
      const expression = expressionOf(value, where);
      if (!expression) return [];
      const results = evaluate(focus, expression.expression, env, where) ?? [];
      const rest = processObject(withoutTemplateExtensions(element), focus, env, where);
      return results.flatMap((result) => {
        if (isObject(result.value)) return [{ ...rest, ...structuredClone(result.value) }];
        warn(
          `templateExtractValue '${expression.expression}' gave a ${result.type || typeof result.value} where the template has a complex element: left out`,
          where,
          'value',
        );
        return [];
      });
    }
    return [processObject(element, focus, env, where)];
  };

  /** The value(s) of a primitive element's `_element` templateExtractValue; undefined when it has none. */
  const primitiveValues = (
    meta: unknown,
    focus: Focus,
    env: FhirPathEnv,
    where: string,
  ): unknown[] | undefined => {
    const value = extensionsOf(meta, TEMPLATE_EXTRACT_VALUE)[0];
    if (!value) return undefined;
    const expression = expressionOf(value, where);
    if (!expression) return [];
    const results = evaluate(focus, expression.expression, env, where) ?? [];
    return results.flatMap((result) => {
      const v = result.value;
      if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') return [v];
      warn(
        `templateExtractValue '${expression.expression}' gave a ${result.type || typeof v} where the template has a primitive: left out`,
        where,
        'value',
      );
      return [];
    });
  };

  /** One object's elements, processed (the object itself is kept). */
  const processObject = (element: Json, focus: Focus, env: FhirPathEnv, where: string): Json => {
    const out: Json = {};
    for (const key of Object.keys(element)) {
      if (key.startsWith('_')) {
        // A primitive's metadata: handled with its value, or alone when the value is absent.
        if (Object.hasOwn(element, key.slice(1))) continue;
      }
      const base = key.startsWith('_') ? key.slice(1) : key;
      const value = key.startsWith('_') ? undefined : element[key];
      const meta = element[`_${base}`];
      const at = `${where}.${base}`;
      if (key === 'extension') {
        const kept = arrayOf<Json>(value).filter(
          (e) => e.url !== TEMPLATE_EXTRACT_CONTEXT && e.url !== TEMPLATE_EXTRACT_VALUE,
        );
        const processed = kept.flatMap((e, i) => processElement(e, focus, env, `${at}[${i}]`));
        if (processed.length > 0) out.extension = processed;
        continue;
      }
      if (Array.isArray(value) || Array.isArray(meta)) {
        const values = Array.isArray(value) ? value : [];
        const metas = Array.isArray(meta) ? meta : [];
        const primitives: unknown[] = [];
        const complex: Json[] = [];
        for (let i = 0; i < Math.max(values.length, metas.length); i++) {
          const v = values[i];
          if (isObject(v)) {
            complex.push(...processElement(v, focus, env, `${at}[${i}]`));
            continue;
          }
          const filled = primitiveValues(metas[i], focus, env, `${at}[${i}]`);
          if (filled) primitives.push(...filled);
          else if (v !== null && v !== undefined) primitives.push(v);
        }
        const all = [...primitives, ...complex];
        if (all.length > 0) out[base] = all;
        continue;
      }
      if (isObject(value)) {
        const results = processElement(value, focus, env, at);
        if (results.length > 1)
          warn(`${base} takes one value; ${results.length} were extracted: the first is kept`, at, 'value');
        if (results[0] !== undefined) out[base] = results[0];
        continue;
      }
      const filled = primitiveValues(meta, focus, env, at);
      if (filled) {
        if (filled.length > 1)
          warn(`${base} takes one value; ${filled.length} were extracted: the first is kept`, at, 'value');
        if (filled[0] !== undefined) out[base] = filled[0];
      } else if (value !== undefined && value !== null) out[base] = value;
      // Other extensions of a primitive stay with it.
      if (isObject(meta)) {
        const rest = withoutTemplateExtensions(meta);
        if (Object.keys(rest).length > 0 && out[base] !== undefined) out[`_${base}`] = rest;
      }
    }
    return out;
  };

  // ---- entries ------------------------------------------------------------------------------

  /** Evaluates a string-valued sub-extension (fullUrl, resourceId, ifNoneExist…) on the focus. */
  const stringPart = (
    extension: Extension,
    part: string,
    focus: Focus,
    env: FhirPathEnv,
    where: string,
  ): string | undefined => {
    const sub = subExtension(extension, part);
    if (!sub) return undefined;
    const expression = expressionOf(sub, where);
    if (!expression) return undefined;
    const result = evaluate(focus, expression.expression, env, where);
    const first = result?.[0]?.value;
    if (typeof first === 'string' && first !== '') return first;
    if (result && result.length > 0)
      warn(`templateExtract ${part} '${expression.expression}' is not a string: ignored`, where, 'value');
    return undefined;
  };

  /** One templateExtract on `focus` (an item instance or the response): its entry, if any. */
  const extractTemplate = (
    extension: Extension,
    focus: Focus,
    env: FhirPathEnv,
    where: string,
    key: string,
  ) => {
    for (const sub of arrayOf<Extension>(extension.extension))
      if (!TEMPLATE_PARTS.has(sub.url)) warn(`templateExtract.${sub.url} is not supported: ignored`, where);
    const reference = subExtension(extension, 'template')?.valueReference;
    const target = isObject(reference) ? reference.reference : undefined;
    if (typeof target !== 'string' || !target.startsWith('#')) {
      warn(
        'templateExtract needs a template that references a contained resource (#id); other templates are not supported',
        where,
      );
      return;
    }
    const found = contained.get(target.slice(1));
    if (!found || typeof found.resource.resourceType !== 'string') {
      warn(
        `templateExtract template ${target} is not a contained resource of the Questionnaire`,
        where,
        'not-found',
      );
      return;
    }
    const { id: _templateId, ...template } = found.resource;
    const type = found.resource.resourceType;
    const templateAt = `Questionnaire.contained[${found.index}]`;
    const resources = processElement(template, focus, env, templateAt);
    resources.forEach((resource, n) => {
      const fullUrlText = stringPart(extension, 'fullUrl', focus, env, where);
      const fullUrl = fullUrlText
        ? UUID.test(fullUrlText)
          ? `urn:uuid:${fullUrlText.toLowerCase()}`
          : fullUrlText
        : `urn:uuid:${input.uuid(`template/${key}/${target}/${n}`)}`;
      const resourceId = stringPart(extension, 'resourceId', focus, env, where);
      const request: Json = {};
      if (resourceId && !allocated.has(resourceId.toLowerCase())) {
        request.method = 'PUT';
        request.url = `${type}/${resourceId}`;
        resource.id = resourceId;
      } else {
        request.method = 'POST';
        request.url = type;
      }
      for (const part of REQUEST_PARTS) {
        const value = stringPart(extension, part, focus, env, where);
        if (value === undefined) continue;
        request[part] = value;
        if (!HONOURED_REQUEST_PARTS.has(part))
          warn(
            `templateExtract ${part}: casebook's transaction endpoint does not act on request.${part}`,
            where,
          );
      }
      entries.push({
        fullUrl,
        resource: { resourceType: type, ...withoutEmpty(resource) },
        request,
      });
    });
  };

  /** Allocates the extractAllocateId uuids of an element (root or one item instance). */
  const allocate = (element: unknown, env: FhirPathEnv, key: string, where: string): FhirPathEnv => {
    const extensions = extensionsOf(element, EXTRACT_ALLOCATE_ID);
    if (extensions.length === 0) return env;
    const scope = { ...env };
    for (const extension of extensions) {
      const name = extension.valueString;
      if (typeof name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
        warn('extractAllocateId needs a valueString naming a variable', where, 'invalid');
        continue;
      }
      const id = input.uuid(`allocate/${key}/${name}`);
      allocated.add(id);
      scope[name] = id;
    }
    return scope;
  };

  // ---- the walk over the response -----------------------------------------------------------

  const flat = new Map<string, QuestionnaireItem>();
  const index = (items: unknown) => {
    for (const item of arrayOf<QuestionnaireItem>(items)) {
      if (typeof item.linkId === 'string' && !flat.has(item.linkId)) flat.set(item.linkId, item);
      index(item.item);
    }
  };
  index(questionnaire.item);

  const walk = (
    rItems: unknown,
    qItems: unknown,
    env: FhirPathEnv,
    parentExpression: string,
    parentKey: string,
  ) => {
    const siblings = arrayOf<QuestionnaireItem>(qItems);
    const seen = new Map<string, number>();
    arrayOf<QuestionnaireResponseItem>(rItems).forEach((rItem, position) => {
      if (typeof rItem.linkId !== 'string') return;
      const item = siblings.find((q) => q.linkId === rItem.linkId) ?? flat.get(rItem.linkId);
      if (!item) return;
      const repetition = seen.get(rItem.linkId) ?? 0;
      seen.set(rItem.linkId, repetition + 1);
      const expression = `${parentExpression}.item[${position}]`;
      const key = `${parentKey}/${rItem.linkId}[${repetition}]`;
      const focus: Focus = { node: rItem, base: 'QuestionnaireResponse.item' };
      const inner = allocate(item, env, key, expression);
      for (const extension of extensionsOf(item, TEMPLATE_EXTRACT))
        extractTemplate(extension, focus, inner, expression, key);
      walk(rItem.item, item.item, inner, expression, key);
      arrayOf<QuestionnaireResponseAnswer>(rItem.answer).forEach((answer, a) => {
        walk(answer.item, item.item, inner, `${expression}.answer[${a}]`, `${key}/answer[${a}]`);
      });
    });
  };

  const rootFocus: Focus = { node: response };
  const rootEnv = allocate(questionnaire, {}, '', 'Questionnaire');
  for (const extension of extensionsOf(questionnaire, TEMPLATE_EXTRACT))
    extractTemplate(extension, rootFocus, rootEnv, 'QuestionnaireResponse', '');
  walk(response.item, questionnaire.item, rootEnv, 'QuestionnaireResponse', '');

  let bundle: Json | undefined;
  const bundleExtension = extensionsOf(questionnaire, TEMPLATE_EXTRACT_BUNDLE)[0];
  if (bundleExtension) {
    const reference = bundleExtension.valueReference;
    const target = isObject(reference) ? reference.reference : undefined;
    const found =
      typeof target === 'string' && target.startsWith('#') ? contained.get(target.slice(1)) : undefined;
    if (!found || found.resource.resourceType !== 'Bundle')
      warn(
        `templateExtractBundle must reference a contained Bundle (#id), not ${JSON.stringify(target ?? null)}`,
        'Questionnaire.extension',
        'not-found',
      );
    else {
      const { id: _bundleId, ...template } = found.resource;
      const processed = withoutEmpty(
        processObject(template, rootFocus, rootEnv, `Questionnaire.contained[${found.index}]`),
      );
      if (processed.type !== 'transaction') {
        warn(
          `templateExtractBundle: the Bundle template is of type ${String(processed.type)}; $extract answers a transaction Bundle`,
          `Questionnaire.contained[${found.index}].type`,
          'value',
        );
        processed.type = 'transaction';
      }
      const bundleEntries = arrayOf<Json>(processed.entry);
      delete processed.entry;
      entries.unshift(...bundleEntries);
      bundle = processed;
    }
  }

  linkAllocatedReferences(entries, allocated);
  return { entries, ...(bundle ? { bundle } : {}) };
};

/**
 * `Type/<uuid>` references to an entry of that type whose fullUrl is `urn:uuid:<uuid>` (an
 * allocated id) become `urn:uuid:<uuid>`: FHIR resolves a transaction's references by fullUrl.
 */
const linkAllocatedReferences = (entries: Json[], allocated: ReadonlySet<string>): void => {
  const types = new Map<string, string>();
  for (const entry of entries) {
    const fullUrl = typeof entry.fullUrl === 'string' ? entry.fullUrl : '';
    const uuid = fullUrl.startsWith('urn:uuid:') ? fullUrl.slice(9) : '';
    const resource = entry.resource;
    if (allocated.has(uuid) && isObject(resource) && typeof resource.resourceType === 'string')
      types.set(`${resource.resourceType}/${uuid}`, fullUrl);
  }
  if (types.size === 0) return;
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) for (const v of value) visit(v);
    else if (isObject(value))
      for (const [key, v] of Object.entries(value)) {
        if (key === 'reference' && typeof v === 'string' && types.has(v)) value[key] = types.get(v);
        else visit(v);
      }
  };
  for (const entry of entries) visit(entry.resource);
};

/** Drops empty objects and arrays (template elements nothing filled). */
const withoutEmpty = (value: Json): Json =>
  Object.fromEntries(
    Object.entries(value).flatMap(([key, v]) => {
      const kept = keep(v);
      return kept === undefined ? [] : [[key, kept] as const];
    }),
  ) as Json;
const keep = (value: unknown): unknown => {
  if (Array.isArray(value)) {
    const items = value.map(keep).filter((v) => v !== undefined);
    return items.length > 0 ? items : undefined;
  }
  if (isObject(value)) {
    const out = withoutEmpty(value);
    return Object.keys(out).length > 0 ? out : undefined;
  }
  return value === null ? undefined : value;
};
