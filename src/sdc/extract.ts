/**
 * SDC `$extract` (issue 4 "definition-based and observation-based extraction to a transaction
 * Bundle (not stored)"; docs/interface.md §4.5 optional POST /QuestionnaireResponse/$extract).
 *
 * Pure apart from `now`: the same response and Questionnaire always give the same Bundle, with
 * fullUrls that are uuid v5 of the response and the item's place in it. Anything that can't be
 * extracted becomes a warning issue; extraction itself never fails.
 */
import r5 from 'fhirpath/fhir-context/r5';
import { v5 as uuidv5 } from 'uuid';
import type { EvaluationBudget } from './budget.js';
import {
  EXTRACT_ALLOCATE_ID,
  extractFromTemplates,
  TEMPLATE_EXTRACT,
  TEMPLATE_EXTRACT_BUNDLE,
  TEMPLATE_EXTRACT_CONTEXT,
  TEMPLATE_EXTRACT_VALUE,
} from './extract-template.js';
import { evaluateFhirPath } from './fhirpath.js';
import type {
  Extension,
  Json,
  OperationOutcome,
  OperationOutcomeIssue,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from './types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition';
/** The SDC extensions $extract reads (valueBoolean; valueCodeableConcept; valueCanonical or complex; complex). */
export const OBSERVATION_EXTRACT = `${SDC}/sdc-questionnaire-observationExtract`;
export const OBSERVATION_EXTRACT_CATEGORY = `${SDC}/sdc-questionnaire-observationExtractCategory`;
export const DEFINITION_EXTRACT = `${SDC}/sdc-questionnaire-definitionExtract`;
export const DEFINITION_EXTRACT_VALUE = `${SDC}/sdc-questionnaire-definitionExtractValue`;
const ITEM_EXTRACTION_CONTEXT = `${SDC}/sdc-questionnaire-itemExtractionContext`;
const QUESTIONNAIRE_UNIT = 'http://hl7.org/fhir/StructureDefinition/questionnaire-unit';
const BASE_PROFILE = 'http://hl7.org/fhir/StructureDefinition/';

/** The uuid v5 namespace of extracted fullUrls (itself uuid v5 of this operation's URL). */
export const EXTRACT_NAMESPACE = uuidv5(
  'https://casebook.dev/fhir/sdc/QuestionnaireResponse/$extract',
  uuidv5.URL,
);

export interface ExtractOptions {
  /** effectiveDateTime of Observations when the response has no `authored`. Default: the clock. */
  readonly now?: Date;
  /** The request's evaluation budget (src/sdc/budget.ts), shared by every expression. */
  readonly budget?: EvaluationBudget;
}

export interface ExtractResult {
  /** A FHIR Bundle of type `transaction` whose entries POST the extracted resources. */
  readonly bundle: Json;
  /** Warnings about what could not be extracted (possibly none). */
  readonly issues: OperationOutcome;
}

// ---------------------------------------------------------------------------------------------
// Loose reading: the HTTP edge checks the outline, but nested data may still be surprising.

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const arrayOf = <T>(value: unknown): T[] => (Array.isArray(value) ? (value.filter(isObject) as T[]) : []);
const extensionsOf = (element: { extension?: unknown }, url: string): Extension[] =>
  arrayOf<Extension>(element.extension).filter((e) => e.url === url);
const subExtension = (extension: Extension, url: string): Extension | undefined =>
  arrayOf<Extension>(extension.extension).find((e) => e.url === url);

/** The value[x] of an answer or extension: its type suffix (`Coding`, `Quantity`…) and value. */
interface Typed {
  readonly kind: string;
  readonly value: unknown;
}
const typedValue = (element: Json): Typed | undefined => {
  for (const [key, value] of Object.entries(element))
    if (/^value[A-Z]/.test(key) && value !== undefined && value !== null)
      return { kind: key.slice(5), value };
  return undefined;
};

// ---------------------------------------------------------------------------------------------
// The FHIR R5 model of fhirpath.js: element types and cardinalities for definition-based paths.

const model = r5 as unknown as {
  path2Type: Record<string, string>;
  path2Repeating: Record<string, boolean>;
  choiceTypePaths: Record<string, string[]>;
  pathsDefinedElsewhere: Record<string, string>;
  type2Parent: Record<string, string>;
};

const ancestorsOf = (type: string): string[] => {
  const chain = [type];
  for (let t = model.type2Parent[type]; t && chain.length < 10; t = model.type2Parent[t]) chain.push(t);
  return chain;
};

/** Whether `type` is a FHIR R5 resource type (a descendant of Resource). */
const isResourceType = (type: string): boolean =>
  /^[A-Z][A-Za-z]+$/.test(type) && type !== 'Resource' && ancestorsOf(type).includes('Resource');

/** One step of an element path: its JSON name, model type and cardinality. */
interface Step {
  readonly name: string;
  readonly type: string;
  readonly repeating: boolean;
  /** The allowed type suffixes of a choice element (`deceased[x]`) whose name is still open. */
  readonly choices?: readonly string[];
}

const lookup = (typePath: string, segment: string): { key: string } | undefined => {
  // Children of a BackboneElement are keyed by full path; those of a data type by the type.
  for (const base of ancestorsOf(typePath)) {
    const key = `${base}.${segment}`;
    if (Object.hasOwn(model.path2Type, key) || Object.hasOwn(model.choiceTypePaths, key)) return { key };
  }
  return undefined;
};

/**
 * Resolves `Patient.name.given` to its steps through the R5 model.
 * @returns the steps, or a reason why the path is not an element of the resource.
 */
const resolvePath = (elementPath: string): Step[] | string => {
  const [root, ...segments] = elementPath.split('.');
  if (!root || !isResourceType(root)) return `${root ?? elementPath} is not a FHIR R5 resource type`;
  if (segments.length === 0) return `${elementPath} names the resource, not an element`;
  const steps: Step[] = [];
  let typePath = root;
  for (const raw of segments) {
    // A slice name (`identifier:mrn`) does not change the element.
    const segment = raw.replace(/:.*$/, '');
    const open = segment.endsWith('[x]');
    const base = open ? segment.slice(0, -3) : segment;
    let found = lookup(typePath, base);
    let chosen: string | undefined;
    // `deceasedBoolean`: a choice element with its type already chosen.
    for (let cut = base.length - 1; !found && cut > 0; cut--) {
      if (!/[A-Z]/.test(base.charAt(cut))) continue;
      const candidate = lookup(typePath, base.slice(0, cut));
      if (candidate && model.choiceTypePaths[candidate.key]?.includes(base.slice(cut))) {
        found = candidate;
        chosen = base.slice(cut);
      }
    }
    if (!found) return `${elementPath}: ${typePath} has no element ${segment}`;
    const repeating = model.path2Repeating[found.key] === true;
    if (chosen) {
      const type = typeOfSuffix(chosen);
      steps.push({ name: base, type, repeating });
      typePath = type;
      continue;
    }
    const choices = model.choiceTypePaths[found.key];
    if (choices) {
      steps.push({ name: base, type: 'choice', repeating, choices });
      typePath = 'Element';
      continue;
    }
    const type = model.path2Type[found.key] ?? 'Element';
    steps.push({ name: base, type, repeating });
    const elsewhere = model.pathsDefinedElsewhere[found.key];
    typePath = elsewhere ?? (type === 'BackboneElement' || type === 'Element' ? found.key : type);
  }
  return steps;
};

/** The FHIR type of a choice suffix: `Boolean` → boolean, `CodeableConcept` stays. */
const typeOfSuffix = (suffix: string): string => {
  const primitive = suffix.charAt(0).toLowerCase() + suffix.slice(1);
  return Object.hasOwn(PRIMITIVES, primitive) ? primitive : suffix;
};

/** FHIR primitive types and the JavaScript type their JSON values have. */
const PRIMITIVES: Record<string, 'string' | 'number' | 'boolean'> = {
  boolean: 'boolean',
  integer: 'number',
  integer64: 'string',
  positiveInt: 'number',
  unsignedInt: 'number',
  decimal: 'number',
  string: 'string',
  markdown: 'string',
  code: 'string',
  id: 'string',
  uri: 'string',
  url: 'string',
  canonical: 'string',
  oid: 'string',
  uuid: 'string',
  base64Binary: 'string',
  date: 'string',
  dateTime: 'string',
  instant: 'string',
  time: 'string',
};

const STRINGS = new Set(['string', 'markdown', 'code', 'id']);
const URIS = new Set(['uri', 'url', 'canonical', 'oid', 'uuid']);
const INTEGERS = new Set(['integer', 'positiveInt', 'unsignedInt', 'integer64', 'decimal']);
const QUANTITIES = new Set([
  'Quantity',
  'Age',
  'Duration',
  'Distance',
  'Count',
  'SimpleQuantity',
  'MoneyQuantity',
]);

/**
 * Converts a typed value (an answer or a fixed value) to an element of FHIR type `type`.
 * @returns the JSON value, or undefined when the value does not fit the element.
 */
const convert = (typed: Typed, type: string): unknown => {
  const { kind, value } = typed;
  switch (kind) {
    case 'Coding': {
      const coding = value as Json;
      if (type === 'Coding') return coding;
      if (type === 'CodeableConcept') return { coding: [coding] };
      if (type === 'CodeableReference') return { concept: { coding: [coding] } };
      if (type === 'code' && typeof coding.code === 'string') return coding.code;
      if (type === 'string' || type === 'markdown') return coding.display ?? coding.code;
      return undefined;
    }
    case 'String':
    case 'Code':
    case 'Markdown':
    case 'Id':
      if (typeof value !== 'string') return undefined;
      if (STRINGS.has(type)) return value;
      if (type === 'CodeableConcept') return { text: value };
      if (type === 'CodeableReference') return { concept: { text: value } };
      return undefined;
    case 'Uri':
    case 'Url':
    case 'Canonical':
      return typeof value === 'string' && (URIS.has(type) || type === 'string') ? value : undefined;
    case 'Boolean':
      return typeof value === 'boolean' && type === 'boolean' ? value : undefined;
    case 'Integer':
    case 'PositiveInt':
    case 'UnsignedInt':
      if (typeof value !== 'number' || !Number.isInteger(value)) return undefined;
      if (INTEGERS.has(type)) return type === 'integer64' ? String(value) : value;
      if (QUANTITIES.has(type)) return { value };
      return undefined;
    case 'Decimal':
      if (typeof value !== 'number') return undefined;
      if (type === 'decimal') return value;
      if (QUANTITIES.has(type)) return { value };
      return undefined;
    case 'Date':
      return typeof value === 'string' && (type === 'date' || type === 'dateTime') ? value : undefined;
    case 'DateTime':
    case 'Instant':
      if (typeof value !== 'string') return undefined;
      if (type === 'dateTime') return value;
      if (type === 'instant' && /T.*(Z|[+-]\d\d:\d\d)$/.test(value)) return value;
      if (type === 'date' && /^\d{4}(-\d\d(-\d\d)?)?$/.test(value)) return value;
      return undefined;
    case 'Time':
      return typeof value === 'string' && type === 'time' ? value : undefined;
    case 'Quantity':
      return QUANTITIES.has(type) ? value : undefined;
    case 'Reference':
      return type === 'Reference' ? value : type === 'CodeableReference' ? { reference: value } : undefined;
    case 'Attachment':
      return type === 'Attachment' ? value : undefined;
    default:
      // Other fixed values (Address, Identifier, Period…) go where the type is the same.
      return kind === type || kind.charAt(0).toLowerCase() + kind.slice(1) === type ? value : undefined;
  }
};

/** A FHIRPath result as a typed value, guessing the FHIR type from the JSON shape. */
const typedFromFhirPath = (value: unknown, type: string): Typed | undefined => {
  if (typeof value === 'boolean') return { kind: 'Boolean', value };
  if (typeof value === 'number') return { kind: Number.isInteger(value) ? 'Integer' : 'Decimal', value };
  if (typeof value === 'string') {
    if (Object.hasOwn(PRIMITIVES, type) && PRIMITIVES[type] === 'string')
      return { kind: type.charAt(0).toUpperCase() + type.slice(1), value };
    return { kind: 'String', value };
  }
  if (!isObject(value)) return undefined;
  if (type === 'CodeableConcept' && !('coding' in value) && !('text' in value) && 'code' in value)
    return { kind: 'Coding', value };
  return { kind: type === 'choice' ? 'Json' : type, value };
};

/** The choice suffix an answer of `kind` takes in an element allowing `choices`. */
const chooseType = (kind: string, choices: readonly string[]): string | undefined => {
  const preference: Record<string, string[]> = {
    Coding: ['CodeableConcept', 'Coding', 'String'],
    Decimal: ['Decimal', 'Quantity'],
    Integer: ['Integer', 'Quantity', 'Decimal'],
    Date: ['Date', 'DateTime'],
    DateTime: ['DateTime', 'Date'],
    Uri: ['Uri', 'Url', 'Canonical', 'String'],
    String: ['String', 'Markdown', 'CodeableConcept'],
  };
  return (preference[kind] ?? [kind]).find((suffix) => choices.includes(suffix));
};

// ---------------------------------------------------------------------------------------------
// Extraction.

/** Where an answer sits: FHIRPath of the response item, and a stable key for its fullUrl. */
interface Place {
  readonly expression: string;
  readonly key: string;
}

/** A resource being built by definition-based extraction, and its open element instances. */
interface DefinitionContext {
  readonly profile: string;
  readonly type: string;
  readonly resource: Json;
}

/** An element instance opened by a group with a `definition` (e.g. one HumanName per group). */
interface Anchor {
  readonly context: DefinitionContext;
  readonly path: string;
  readonly element: Json;
}

interface Scope {
  /** Observation-based extraction is on for this item (inherited from the root and groups). */
  readonly observation: boolean;
  readonly categories: readonly unknown[];
  /** Innermost last. */
  readonly definitions: readonly DefinitionContext[];
  /** Innermost last; they close with the group that opened them. */
  readonly anchors: readonly Anchor[];
  /** The QuestionnaireResponse item (or the response) FHIRPath expressions start from. */
  readonly fhirPathContext: QuestionnaireResponseItem | QuestionnaireResponse;
  readonly place: Place;
}

/**
 * Extracts FHIR resources from a QuestionnaireResponse per SDC (issue 4; docs/interface.md §4.5):
 * - observation-based: every answer of a question with a `code` where `sdc-questionnaire-
 *   observationExtract` is true (on the item, an ancestor group or the root; the nearest wins)
 *   becomes an Observation (status final, code, category from `…observationExtractCategory`,
 *   subject, encounter, effectiveDateTime = authored or `now`, performer = author, derivedFrom the
 *   response, value[x] from the answer: Coding → CodeableConcept, decimal → Quantity with the
 *   `questionnaire-unit`, date → dateTime). Groups only pass the setting on to their items.
 * - definition-based: the root or each instance of an item carrying `sdc-questionnaire-
 *   definitionExtract` (valueCanonical, or the STU4 complex form with `definition`) becomes one
 *   resource of the profile's type; answers of descendant items with `definition`
 *   (`…/Patient#Patient.name.given`) are set at that element path, typed and sized through the
 *   fhirpath.js R5 model (so `gender` gets a code and `maritalStatus` a CodeableConcept; repeating
 *   elements become arrays). A group with a `definition` opens one element instance per group
 *   repetition. `sdc-questionnaire-definitionExtractValue` sets fixed values or FHIRPath results.
 * - template-based (SDC 4.0, issue 35): src/sdc/extract-template.ts; its entries follow.
 * Extraction extensions casebook does not act on are warnings naming them; a form that asks for
 * extraction and yields nothing gets an informational issue saying so.
 *
 * Entries are `POST <type>` with fullUrl `urn:uuid:<uuid v5>` of the response id (or content) and
 * the item's place, so extracting the same response twice gives the same Bundle.
 * Never throws for odd content: what can't be extracted is reported as a warning issue.
 */
export const extract = async (
  given: QuestionnaireResponse,
  givenQuestionnaire: Questionnaire,
  options: ExtractOptions = {},
): Promise<ExtractResult> => {
  // Copies: fhirpath.js annotates what it evaluates, and the caller's objects stay untouched.
  const response = structuredClone(given);
  const questionnaire = structuredClone(givenQuestionnaire);
  const now = options.now ?? new Date();
  const issues: OperationOutcomeIssue[] = [];
  const entries: Json[] = [];
  const warn = (diagnostics: string, expression?: string, code = 'not-supported') =>
    issues.push({
      severity: 'warning',
      code,
      diagnostics,
      ...(expression ? { expression: [expression] } : {}),
    });
  const seed = response.id
    ? `QuestionnaireResponse/${response.id}`
    : uuidv5(JSON.stringify(response), EXTRACT_NAMESPACE);
  const fullUrl = (key: string) => `urn:uuid:${uuidv5(`${seed}#${key}`, EXTRACT_NAMESPACE)}`;
  const derivedFrom = response.id ? [{ reference: `QuestionnaireResponse/${response.id}` }] : undefined;
  const usesDefinitions = hasExtension(questionnaire, DEFINITION_EXTRACT);

  /** Evaluates an SDC expression on the current item (or the response at the root). */
  const evaluate = (scope: Scope, expression: string): unknown[] | string => {
    try {
      const data = scope.fhirPathContext;
      return evaluateFhirPath(
        data,
        expression,
        { resource: response, questionnaire, context: data },
        {
          ...(data === response ? {} : { base: 'QuestionnaireResponse.item' }),
          now,
          ...(options.budget ? { budget: options.budget } : {}),
        },
      );
    } catch (error) {
      return error instanceof Error ? error.message : String(error);
    }
  };

  // ---- definition-based -------------------------------------------------------------------

  /** The profile and resource type of a definitionExtract; a warning when unusable. */
  const definitionTarget = (
    element: QuestionnaireItem | Questionnaire,
    place: Place,
  ): { profile: string; type: string } | undefined => {
    const extension = extensionsOf(element, DEFINITION_EXTRACT)[0];
    if (!extension) return undefined;
    const profile =
      typeof extension.valueCanonical === 'string'
        ? extension.valueCanonical
        : (subExtension(extension, 'definition')?.valueCanonical as string | undefined);
    if (typeof profile !== 'string' || !profile) {
      warn(
        'definitionExtract names no profile (valueCanonical or a definition sub-extension)',
        place.expression,
      );
      return undefined;
    }
    for (const sub of arrayOf<Extension>(extension.extension))
      if (sub.url !== 'definition')
        warn(
          `definitionExtract.${sub.url} is not supported: the entry is POSTed unconditionally`,
          place.expression,
        );
    const url = profile.split('|')[0]!;
    let type = url.startsWith(BASE_PROFILE) ? url.slice(BASE_PROFILE.length) : undefined;
    if (!type || !isResourceType(type)) {
      // A profile we can't read: its resource type is the root of the items' definitions.
      const roots = new Set(
        descendantDefinitions(element)
          .filter((d) => d.split('#')[0]?.split('|')[0] === url)
          .map((d) => d.split('#')[1]?.split('.')[0]),
      );
      type = roots.size === 1 ? [...roots][0] : undefined;
    }
    if (!type || !isResourceType(type)) {
      warn(
        `definitionExtract profile ${profile}: can't tell which resource type it profiles`,
        place.expression,
      );
      return undefined;
    }
    return { profile: url, type };
  };

  /** The context an item `definition` belongs to, and its element path. */
  const contextFor = (
    definition: string,
    scope: Scope,
  ): { context: DefinitionContext; elementPath: string } | undefined => {
    const hash = definition.indexOf('#');
    if (hash < 0) return undefined;
    const profile = definition.slice(0, hash).split('|')[0];
    const elementPath = definition.slice(hash + 1);
    const root = elementPath.split('.')[0];
    const contexts = [...scope.definitions].reverse();
    const context =
      contexts.find((c) => c.profile === profile) ??
      contexts.find((c) => c.type === root && profile === `${BASE_PROFILE}${root}`);
    return context ? { context, elementPath } : undefined;
  };

  /** Repeating-element instances created for a path outside any group (`name.text` at the root). */
  const implicit = new WeakSet<Json>();

  /** Walks to the parent of the last step, creating elements; the first instance of repeating ones. */
  const parentOf = (start: Json, steps: readonly Step[]): Json => {
    let element = start;
    for (const step of steps) {
      if (step.repeating) {
        const list = Array.isArray(element[step.name]) ? (element[step.name] as unknown[]) : [];
        element[step.name] = list;
        if (!isObject(list[0])) {
          list[0] = {};
          implicit.add(list[0] as Json);
        }
        element = list[0] as Json;
      } else {
        if (!isObject(element[step.name])) element[step.name] = {};
        element = element[step.name] as Json;
      }
    }
    return element;
  };

  /** Finds where `elementPath` starts: the innermost anchor it lies under, or the resource. */
  const startOf = (context: DefinitionContext, elementPath: string, scope: Scope) => {
    const anchor = [...scope.anchors]
      .reverse()
      .find((a) => a.context === context && (elementPath === a.path || elementPath.startsWith(`${a.path}.`)));
    return anchor
      ? { element: anchor.element, skip: anchor.path.split('.').length - 1 }
      : { element: context.resource, skip: 0 };
  };

  /** Sets one value at a definition path; a warning when it does not fit. */
  const setDefinitionValue = (
    definition: string,
    typedValues: readonly Typed[],
    scope: Scope,
    expression: string,
  ): void => {
    const target = contextFor(definition, scope);
    if (!target) {
      warn(`no definitionExtract context for ${definition}: not extracted`, expression);
      return;
    }
    const steps = resolvePath(target.elementPath);
    if (typeof steps === 'string') {
      warn(`${definition}: ${steps}`, expression);
      return;
    }
    const start = startOf(target.context, target.elementPath, scope);
    const rest = steps.slice(start.skip);
    const last = rest.at(-1);
    if (!last) {
      warn(`${definition} names an element group; give it to a group item`, expression);
      return;
    }
    const parent = parentOf(start.element, rest.slice(0, -1));
    for (const typed of typedValues) {
      let name = last.name;
      let type = last.type;
      if (last.choices) {
        const suffix = chooseType(typed.kind, last.choices);
        if (!suffix) {
          warn(
            `a ${typed.kind} answer does not fit ${target.elementPath} (${last.choices.join(', ')})`,
            expression,
          );
          continue;
        }
        name = `${last.name}${suffix}`;
        type = typeOfSuffix(suffix);
      }
      const value = typed.kind === 'Json' ? typed.value : convert(typed, type);
      if (value === undefined) {
        warn(`a ${typed.kind} answer can't be set on ${target.elementPath} (${type})`, expression);
        continue;
      }
      if (last.repeating) {
        const list = Array.isArray(parent[name]) ? (parent[name] as unknown[]) : [];
        parent[name] = [...list, value];
      } else if (parent[name] !== undefined) {
        warn(`${target.elementPath} takes one value: further answers are not extracted`, expression);
      } else {
        parent[name] = value;
      }
    }
  };

  /** Applies the definitionExtractValue extensions of an item or the root. */
  const applyExtractValues = (element: QuestionnaireItem | Questionnaire, scope: Scope) => {
    for (const extension of extensionsOf(element, DEFINITION_EXTRACT_VALUE)) {
      const definitionExtension = subExtension(extension, 'definition');
      const definition = definitionExtension?.valueUri ?? definitionExtension?.valueCanonical;
      if (typeof definition !== 'string') {
        warn('definitionExtractValue without a definition: ignored', scope.place.expression);
        continue;
      }
      const fixed = subExtension(extension, 'fixed-value');
      const expression = subExtension(extension, 'expression')?.valueExpression as Json | undefined;
      if (fixed) {
        const typed = typedValue(fixed);
        if (typed) setDefinitionValue(definition, [typed], scope, scope.place.expression);
        else
          warn(`definitionExtractValue ${definition}: fixed-value has no value[x]`, scope.place.expression);
      } else if (expression && typeof expression.expression === 'string') {
        if (expression.language !== undefined && expression.language !== 'text/fhirpath') {
          warn(
            `definitionExtractValue ${definition}: only text/fhirpath expressions are supported`,
            scope.place.expression,
          );
          continue;
        }
        const result = evaluate(scope, expression.expression);
        if (typeof result === 'string') {
          warn(
            `definitionExtractValue ${definition}: FHIRPath failed: ${result}`,
            scope.place.expression,
            'processing',
          );
          continue;
        }
        const target = contextFor(definition, scope);
        const steps = target ? resolvePath(target.elementPath) : undefined;
        const last = Array.isArray(steps) ? steps.at(-1) : undefined;
        const typed = result
          .map((v) => typedFromFhirPath(v, last?.type ?? 'string'))
          .filter((t): t is Typed => t !== undefined);
        if (typed.length > 0) setDefinitionValue(definition, typed, scope, scope.place.expression);
      } else {
        warn(
          `definitionExtractValue ${definition}: needs a fixed-value or an expression`,
          scope.place.expression,
        );
      }
    }
  };

  /** Opens a definition context (root or one item instance); returns the scope inside it. */
  const openContext = (element: QuestionnaireItem | Questionnaire, scope: Scope): Scope => {
    if (extensionsOf(element, ITEM_EXTRACTION_CONTEXT).length > 0)
      warn(
        'itemExtractionContext (legacy) is not supported: use sdc-questionnaire-definitionExtract',
        scope.place.expression,
      );
    const target = definitionTarget(element, scope.place);
    if (!target) return scope;
    const context: DefinitionContext = {
      profile: target.profile,
      type: target.type,
      resource: { resourceType: target.type },
    };
    opened.push({ context, place: scope.place });
    return { ...scope, definitions: [...scope.definitions, context] };
  };
  const opened: { context: DefinitionContext; place: Place }[] = [];

  /** A group item with `definition` inside a context: one element instance per repetition. */
  const openAnchor = (item: QuestionnaireItem, scope: Scope): Scope => {
    if (typeof item.definition !== 'string') return scope;
    const target = contextFor(item.definition, scope);
    if (!target) return scope;
    const steps = resolvePath(target.elementPath);
    if (typeof steps === 'string') {
      warn(`${item.definition}: ${steps}`, scope.place.expression);
      return scope;
    }
    const start = startOf(target.context, target.elementPath, scope);
    const rest = steps.slice(start.skip);
    const last = rest.at(-1);
    if (!last || last.choices || Object.hasOwn(PRIMITIVES, last.type)) return scope;
    const parent = parentOf(start.element, rest.slice(0, -1));
    let anchored: Json;
    if (last.repeating) {
      const list = Array.isArray(parent[last.name]) ? (parent[last.name] as unknown[]) : [];
      // The first group instance takes over an instance values outside the group already made.
      const claimed = list.find((e): e is Json => isObject(e) && implicit.has(e));
      if (claimed) implicit.delete(claimed);
      anchored = claimed ?? {};
      parent[last.name] = claimed ? list : [...list, anchored];
    } else {
      if (!isObject(parent[last.name])) parent[last.name] = {};
      anchored = parent[last.name] as Json;
    }
    return {
      ...scope,
      anchors: [...scope.anchors, { context: target.context, path: target.elementPath, element: anchored }],
    };
  };

  // ---- observation-based ------------------------------------------------------------------

  const observationValue = (item: QuestionnaireItem, typed: Typed): Json | undefined => {
    switch (typed.kind) {
      case 'Coding':
        return { valueCodeableConcept: { coding: [typed.value] } };
      case 'Decimal':
      case 'Integer': {
        const unit = extensionsOf(item, QUESTIONNAIRE_UNIT)[0]?.valueCoding as Json | undefined;
        if (typed.kind === 'Integer' && !unit) return { valueInteger: typed.value };
        return {
          valueQuantity: {
            value: typed.value,
            ...(unit
              ? {
                  ...((unit.display ?? unit.code) ? { unit: unit.display ?? unit.code } : {}),
                  ...(unit.system ? { system: unit.system } : {}),
                  ...(unit.code ? { code: unit.code } : {}),
                }
              : {}),
          },
        };
      }
      case 'Date':
        return { valueDateTime: typed.value };
      case 'Quantity':
      case 'String':
      case 'Boolean':
      case 'DateTime':
      case 'Time':
      case 'Attachment':
        return { [`value${typed.kind}`]: typed.value };
      default:
        return undefined;
    }
  };

  const extractObservations = (item: QuestionnaireItem, rItem: QuestionnaireResponseItem, scope: Scope) => {
    const codes = arrayOf<Json>(item.code);
    if (codes.length === 0) {
      if (extensionsOf(item, OBSERVATION_EXTRACT).length > 0)
        warn(`item ${item.linkId} asks for observation extraction but has no code`, scope.place.expression);
      return;
    }
    arrayOf<QuestionnaireResponseAnswer>(rItem.answer).forEach((answer, index) => {
      const expression = `${scope.place.expression}.answer[${index}]`;
      const typed = typedValue(answer);
      const value = typed ? observationValue(item, typed) : undefined;
      if (!value) {
        warn(
          `a ${typed?.kind ?? 'missing'} answer of item ${item.linkId} can't be an Observation value: not extracted`,
          expression,
        );
        return;
      }
      const observation: Json = {
        resourceType: 'Observation',
        status: 'final',
        ...(scope.categories.length > 0 ? { category: scope.categories } : {}),
        code: { coding: codes },
        ...(response.subject ? { subject: response.subject } : {}),
        ...(response.encounter ? { encounter: response.encounter } : {}),
        effectiveDateTime: response.authored ?? now.toISOString(),
        ...(response.author ? { performer: [response.author] } : {}),
        ...value,
        ...(derivedFrom ? { derivedFrom } : {}),
      };
      entries.push({
        fullUrl: fullUrl(`Observation/${scope.place.key}/answer[${index}]`),
        resource: observation,
        request: { method: 'POST', url: 'Observation' },
      });
    });
  };

  // ---- the walk ---------------------------------------------------------------------------

  const flat = new Map<string, QuestionnaireItem>();
  const index = (items: unknown) => {
    for (const item of arrayOf<QuestionnaireItem>(items)) {
      if (typeof item.linkId === 'string' && !flat.has(item.linkId)) flat.set(item.linkId, item);
      index(item.item);
    }
  };
  index(questionnaire.item);

  const observationSetting = (element: { extension?: unknown }, inherited: boolean) => {
    const own = extensionsOf(element, OBSERVATION_EXTRACT)[0]?.valueBoolean;
    return typeof own === 'boolean' ? own : inherited;
  };
  const categoriesOf = (element: { extension?: unknown }, inherited: readonly unknown[]) => {
    const own = extensionsOf(element, OBSERVATION_EXTRACT_CATEGORY)
      .map((e) => e.valueCodeableConcept)
      .filter(isObject);
    return own.length > 0 ? own : inherited;
  };

  const walk = (
    rItems: unknown,
    qItems: unknown,
    scope: Scope,
    parentExpression: string,
    parentKey: string,
  ) => {
    const siblings = arrayOf<QuestionnaireItem>(qItems);
    const seen = new Map<string, number>();
    arrayOf<QuestionnaireResponseItem>(rItems).forEach((rItem, position) => {
      const expression = `${parentExpression}.item[${position}]`;
      if (typeof rItem.linkId !== 'string') {
        warn('a response item without linkId: not extracted', expression, 'invalid');
        return;
      }
      const item = siblings.find((q) => q.linkId === rItem.linkId) ?? flat.get(rItem.linkId);
      if (!item) {
        if (hasAnswers(rItem))
          warn(`linkId ${rItem.linkId} is not in the Questionnaire: not extracted`, expression, 'not-found');
        return;
      }
      const repetition = seen.get(rItem.linkId) ?? 0;
      seen.set(rItem.linkId, repetition + 1);
      const place: Place = { expression, key: `${parentKey}/${rItem.linkId}[${repetition}]` };
      let inner: Scope = {
        observation: observationSetting(item, scope.observation),
        categories: categoriesOf(item, scope.categories),
        definitions: scope.definitions,
        anchors: scope.anchors,
        fhirPathContext: rItem,
        place,
      };
      inner = openContext(item, inner);
      if (item.type === 'group') inner = openAnchor(item, inner);
      applyExtractValues(item, inner);

      if (item.type !== 'group' && item.type !== 'display') {
        if (inner.observation) extractObservations(item, rItem, inner);
        if (typeof item.definition === 'string' && item.definition.includes('#')) {
          const answers = arrayOf<QuestionnaireResponseAnswer>(rItem.answer);
          if (answers.length > 0 && (inner.definitions.length > 0 || usesDefinitions))
            setDefinitionValue(
              item.definition,
              answers.map(typedValue).filter((t): t is Typed => t !== undefined),
              inner,
              expression,
            );
        }
      }
      walk(rItem.item, item.item, inner, expression, place.key);
      arrayOf<QuestionnaireResponseAnswer>(rItem.answer).forEach((answer, a) => {
        walk(answer.item, item.item, inner, `${expression}.answer[${a}]`, `${place.key}/answer[${a}]`);
      });
    });
  };

  const rootPlace: Place = { expression: 'QuestionnaireResponse', key: '' };
  let root: Scope = {
    observation: observationSetting(questionnaire, false),
    categories: categoriesOf(questionnaire, []),
    definitions: [],
    anchors: [],
    fhirPathContext: response,
    place: rootPlace,
  };
  root = openContext(questionnaire, root);
  applyExtractValues(questionnaire, root);
  walk(response.item, questionnaire.item, root, 'QuestionnaireResponse', '');

  // Definition-based resources follow the Observations in the order their contexts opened.
  for (const { context, place } of opened) {
    const resource = prune(context.resource);
    if (Object.keys(resource).length <= 1) {
      warn(
        `nothing to extract into ${context.type} (no answers with a definition)`,
        place.expression,
        'informational',
      );
      continue;
    }
    entries.push({
      fullUrl: fullUrl(`${context.type}${place.key}`),
      resource,
      request: { method: 'POST', url: context.type },
    });
  }

  // Template-based extraction (SDC 4.0): src/sdc/extract-template.ts.
  const templated = extractFromTemplates({
    response,
    questionnaire,
    uuid: (key) => uuidv5(`${seed}#${key}`, EXTRACT_NAMESPACE),
    warn,
    now,
    ...(options.budget ? { budget: options.budget } : {}),
  });
  entries.push(...templated.entries);

  reportUnsupported(questionnaire, warn);
  if (entries.length === 0 && issues.length === 0 && asksForExtraction(questionnaire))
    issues.push({
      severity: 'information',
      code: 'informational',
      diagnostics:
        'the Questionnaire asks for extraction, but the response holds no answers that extract to a resource',
      expression: ['QuestionnaireResponse'],
    });

  return {
    bundle: {
      resourceType: 'Bundle',
      ...(templated.bundle ?? {}),
      type: 'transaction',
      ...(entries.length > 0 ? { entry: entries } : {}),
    },
    issues: { resourceType: 'OperationOutcome', issue: issues },
  };
};

/** The extraction extensions this module acts on (anything else of SDC's `…xtract…` is reported). */
const SUPPORTED_EXTRACTION = new Set([
  OBSERVATION_EXTRACT,
  OBSERVATION_EXTRACT_CATEGORY,
  DEFINITION_EXTRACT,
  DEFINITION_EXTRACT_VALUE,
  TEMPLATE_EXTRACT,
  TEMPLATE_EXTRACT_BUNDLE,
  EXTRACT_ALLOCATE_ID,
]);

/** Whether the form asks for any kind of extraction. */
const asksForExtraction = (questionnaire: Questionnaire): boolean => {
  const visit = (element: { extension?: unknown; item?: unknown }): boolean =>
    arrayOf<Extension>(element.extension).some((e) => SUPPORTED_EXTRACTION.has(e.url)) ||
    arrayOf<QuestionnaireItem>(element.item).some(visit);
  return visit(questionnaire);
};

/**
 * Reports extraction extensions of the Questionnaire and its items that casebook does not act on
 * (issue 35: no extraction feature is silently ignored): an SDC extension whose name speaks of
 * extraction and is none of {@link SUPPORTED_EXTRACTION}, and template extensions outside a template.
 */
const reportUnsupported = (
  questionnaire: Questionnaire,
  warn: (diagnostics: string, expression?: string, code?: string) => void,
): void => {
  const visit = (element: { extension?: unknown; item?: unknown }, path: string) => {
    arrayOf<Extension>(element.extension).forEach((extension, i) => {
      const url = extension.url;
      if (url === TEMPLATE_EXTRACT_CONTEXT || url === TEMPLATE_EXTRACT_VALUE)
        warn(
          `${url.split('/').pop()} acts only inside a contained template resource, not on the Questionnaire or its items: ignored`,
          `${path}.extension[${i}]`,
        );
      else if (
        url.startsWith(`${SDC}/`) &&
        /xtract/i.test(url) &&
        !SUPPORTED_EXTRACTION.has(url) &&
        url !== ITEM_EXTRACTION_CONTEXT
      )
        warn(`${url.split('/').pop()} is not supported by $extract: ignored`, `${path}.extension[${i}]`);
    });
    arrayOf<QuestionnaireItem>(element.item).forEach((item, i) => {
      visit(item, `${path}.item[${i}]`);
    });
  };
  visit(questionnaire, 'Questionnaire');
};

const hasAnswers = (rItem: QuestionnaireResponseItem): boolean =>
  arrayOf(rItem.answer).length > 0 || arrayOf<QuestionnaireResponseItem>(rItem.item).some(hasAnswers);

const hasExtension = (questionnaire: Questionnaire, url: string): boolean => {
  const visit = (element: { extension?: unknown; item?: unknown }): boolean =>
    extensionsOf(element, url).length > 0 || arrayOf<QuestionnaireItem>(element.item).some(visit);
  return visit(questionnaire);
};

/** The `definition`s of an element's descendant items. */
const descendantDefinitions = (element: { item?: unknown }): string[] =>
  arrayOf<QuestionnaireItem>(element.item).flatMap((item) => [
    ...(typeof item.definition === 'string' ? [item.definition] : []),
    ...descendantDefinitions(item),
  ]);

/** Drops empty objects and arrays (element instances opened by groups that got no answers). */
const prune = (value: Json): Json =>
  // fromEntries: a key such as `__proto__` stays an own element, never the object's prototype.
  Object.fromEntries(
    Object.entries(value).flatMap(([key, v]) => {
      const pruned = pruneValue(v);
      return pruned === undefined ? [] : [[key, pruned] as const];
    }),
  ) as Json;
const pruneValue = (value: unknown): unknown => {
  if (Array.isArray(value)) {
    const items = value.map(pruneValue).filter((v) => v !== undefined);
    return items.length > 0 ? items : undefined;
  }
  if (isObject(value)) {
    const out = prune(value);
    return Object.keys(out).length > 0 ? out : undefined;
  }
  return value;
};
