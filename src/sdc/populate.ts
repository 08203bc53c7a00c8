/**
 * SDC expression-based population (issue 4; docs/interface.md §4.4 `POST /Questionnaire/$populate`; SDC IG
 * "Form Population", http://hl7.org/fhir/uv/sdc/populate.html): from a Questionnaire and the launch
 * context resources, an `in-progress` QuestionnaireResponse that mirrors the form with its initial
 * answers. Pure apart from the optional canonical resolver; every FHIRPath goes through
 * src/sdc/fhirpath.ts. An expression that fails or answers the wrong type is a warning in
 * `issues`, never a failure.
 */
import type { EvaluationBudget } from './budget.js';
import { evaluateFhirPathTyped, type FhirPathEnv, FhirPathError, type TypedValue } from './fhirpath.js';
import type {
  CanonicalResolver,
  Coding,
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

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';

/** The extensions $populate reads (SDC IG "Expression-based population", "Calculations"). */
export const POPULATE_EXTENSIONS = {
  launchContext: `${SDC}sdc-questionnaire-launchContext`,
  variable: 'http://hl7.org/fhir/StructureDefinition/variable',
  initialExpression: `${SDC}sdc-questionnaire-initialExpression`,
  itemPopulationContext: `${SDC}sdc-questionnaire-itemPopulationContext`,
  calculatedExpression: `${SDC}sdc-questionnaire-calculatedExpression`,
  unit: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unit',
} as const;

/**
 * Context names of docs/interface.md §4.4 that differ from the SDC launch context codes
 * (http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext): the spec's `subject` is SDC's `patient`.
 */
const LAUNCH_ALIASES: Readonly<Record<string, string>> = { subject: 'patient' };

/** Calculations feed each other; they are re-evaluated until the response stops changing. */
const MAX_CALCULATION_ROUNDS = 10;

/** The input of {@link populate}. */
export interface PopulateInput {
  readonly questionnaire: Questionnaire;
  /**
   * `Questionnaire/<id>` of a stored Questionnaire: the response's `questionnaire` when the
   * Questionnaire has no `url` (issue 13: `questionnaire` is 1..1 in R5).
   */
  readonly questionnaireReference?: string;
  /** The response's subject; without it, the `subject`/`patient` context resource's `Type/id`. */
  readonly subject?: { reference?: string };
  /** Launch contexts and supplied variables (SDC $populate `context`: `name` + `content`). */
  readonly context: { name: string; content: Json }[];
  /** Unused by population itself today; accepted so callers pass one resolver to every operation. */
  readonly resolve?: CanonicalResolver;
  /** What `now()`/`today()` answer; the wall clock without it. */
  readonly now?: Date;
  /** The request's evaluation budget (src/sdc/budget.ts), shared by every expression. */
  readonly budget?: EvaluationBudget;
}

/** The output of {@link populate}: the response and the warnings met while building it. */
export interface PopulateResult {
  readonly response: QuestionnaireResponse;
  readonly issues: OperationOutcome;
}

interface ValueExpression {
  readonly name?: string;
  readonly language?: string;
  readonly expression?: string;
}

/** One response item built for a Questionnaire item, kept to run calculations over. */
interface Node {
  readonly qItem: QuestionnaireItem;
  readonly path: string;
  readonly qrItem: QuestionnaireResponseItem;
  /** The itemPopulationContext element this group instance was made for (`%name`). */
  readonly binding: FhirPathEnv;
  readonly children: Node[];
}

type Answer = QuestionnaireResponseAnswer;

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

const arrayOf = <T>(value: unknown): T[] => (Array.isArray(value) ? (value as T[]) : []);

const clone = <T>(value: T): T => structuredClone(value);

const extensionsOf = (element: { extension?: unknown }, url: string): { ext: Extension; index: number }[] =>
  arrayOf<Extension>(element.extension)
    .map((ext, index) => ({ ext, index }))
    .filter(({ ext }) => isObject(ext) && ext.url === url);

const valueExpressionOf = (ext: Extension): ValueExpression | undefined =>
  isObject(ext.valueExpression) ? (ext.valueExpression as ValueExpression) : undefined;

/** The `value[x]` element of an initial value, answer option or answer: `[key, value]`. */
const valueXOf = (element: Record<string, unknown>): [string, unknown] | undefined => {
  const key = Object.keys(element).find((k) => k.startsWith('value') && k.length > 5);
  return key ? [key, element[key]] : undefined;
};

/** Collects warnings in order, once each. */
class Issues {
  private readonly seen = new Map<string, OperationOutcomeIssue>();
  add(code: string, diagnostics: string, expression: string): void {
    const issue: OperationOutcomeIssue = { severity: 'warning', code, diagnostics, expression: [expression] };
    const key = JSON.stringify(issue);
    if (!this.seen.has(key)) this.seen.set(key, issue);
  }
  addAll(other: Issues): void {
    for (const [key, issue] of other.seen) if (!this.seen.has(key)) this.seen.set(key, issue);
  }
  list(): OperationOutcomeIssue[] {
    return [...this.seen.values()];
  }
}

/* ------------------------------------------------------------------ answer conversion --- */

/** The broad kind of a FHIRPath result, from its type name (and its JavaScript value otherwise). */
type Kind =
  | 'boolean'
  | 'integer'
  | 'decimal'
  | 'string'
  | 'date'
  | 'dateTime'
  | 'time'
  | 'quantity'
  | 'Coding'
  | 'CodeableConcept'
  | 'Reference'
  | 'Attachment'
  | 'resource'
  | 'other';

const KINDS: Readonly<Record<string, Kind>> = {
  boolean: 'boolean',
  integer: 'integer',
  integer64: 'integer',
  positiveInt: 'integer',
  unsignedInt: 'integer',
  decimal: 'decimal',
  string: 'string',
  code: 'string',
  id: 'string',
  markdown: 'string',
  uri: 'string',
  url: 'string',
  canonical: 'string',
  oid: 'string',
  uuid: 'string',
  base64Binary: 'string',
  date: 'date',
  dateTime: 'dateTime',
  instant: 'dateTime',
  time: 'time',
  Boolean: 'boolean',
  Integer: 'integer',
  Long: 'integer',
  Decimal: 'decimal',
  String: 'string',
  Date: 'date',
  DateTime: 'dateTime',
  Time: 'time',
  Quantity: 'quantity',
  Age: 'quantity',
  Duration: 'quantity',
  Distance: 'quantity',
  Count: 'quantity',
  SimpleQuantity: 'quantity',
  MoneyQuantity: 'quantity',
  Coding: 'Coding',
  CodeableConcept: 'CodeableConcept',
  Reference: 'Reference',
  Attachment: 'Attachment',
};

const kindOf = (typed: TypedValue): Kind => {
  const name = typed.type.slice(typed.type.indexOf('.') + 1);
  if (Object.hasOwn(KINDS, name)) return KINDS[name]!;
  const value = typed.value;
  if (isObject(value) && typeof value.resourceType === 'string') return 'resource';
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'decimal';
  if (typeof value === 'string') return 'string';
  return 'other';
};

const PRIMITIVES: readonly Kind[] = ['boolean', 'integer', 'decimal', 'string', 'date', 'dateTime', 'time'];

const UCUM = 'http://unitsofmeasure.org';

/** FHIRPath calendar-duration units and their UCUM codes. */
const CALENDAR_UNITS: Readonly<Record<string, string>> = {
  year: 'a',
  month: 'mo',
  week: 'wk',
  day: 'd',
  hour: 'h',
  minute: 'min',
  second: 's',
  millisecond: 'ms',
};

/** `5 'mg'` / `3 years` (a resolved System.Quantity) as a FHIR Quantity. */
const quantityFromText = (text: string): Json | undefined => {
  const match = /^(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?:\s+(.+))?$/.exec(text.trim());
  if (!match) return undefined;
  const value = Number(match[1]);
  const unit = match[2];
  if (!unit) return { value };
  const quoted = /^'(.*)'$/.exec(unit);
  if (quoted) return { value, unit: quoted[1], system: UCUM, code: quoted[1] };
  const calendar = CALENDAR_UNITS[unit.replace(/s$/, '')];
  return calendar ? { value, unit, system: UCUM, code: calendar } : { value, unit };
};

const describeValue = (typed: TypedValue): string =>
  `${typed.type || typeof typed.value} ${JSON.stringify(typed.value)?.slice(0, 80) ?? ''}`.trim();

const article = (word: string) => `${/^[aeiou]/i.test(word) ? 'an' : 'a'} ${word}`;

const withSeconds = (time: string) => (/^\d{2}:\d{2}$/.test(time) ? `${time}:00` : time);

const sameCoding = (a: Coding, b: Coding): boolean =>
  a.code === b.code && (a.system === undefined || b.system === undefined || a.system === b.system);

/**
 * Converts one expression result to an answer of the item's type (SDC: initial/calculated values
 * take the item's answer type). Returns the answer's `[valueX, value]` or a reason it cannot.
 */
const toAnswerValue = (item: QuestionnaireItem, typed: TypedValue): [string, unknown] | string => {
  const kind = kindOf(typed);
  const { value } = typed;
  const wrong = () => `${describeValue(typed)} cannot answer ${article(item.type)} item`;
  switch (item.type) {
    case 'boolean':
      return kind === 'boolean' ? ['valueBoolean', value] : wrong();
    case 'decimal':
      return (kind === 'decimal' || kind === 'integer') && typeof value === 'number'
        ? ['valueDecimal', value]
        : wrong();
    case 'integer':
      return (kind === 'integer' || kind === 'decimal') &&
        typeof value === 'number' &&
        Number.isInteger(value)
        ? ['valueInteger', value]
        : wrong();
    case 'date':
      if (kind === 'date' && typeof value === 'string') return ['valueDate', value];
      // A dateTime (e.g. now()) answers a date item with its date part.
      if (kind === 'dateTime' && typeof value === 'string') return ['valueDate', value.split('T')[0]];
      return wrong();
    case 'dateTime':
      if ((kind === 'date' || kind === 'dateTime') && typeof value === 'string')
        return ['valueDateTime', value.replace(/T(\d{2}:\d{2})(?=$|[Z+-])/, 'T$1:00')];
      return wrong();
    case 'time':
      return kind === 'time' && typeof value === 'string' ? ['valueTime', withSeconds(value)] : wrong();
    case 'string':
    case 'text':
      // Any primitive answers a text item as its string form (FHIRPath toString()).
      return PRIMITIVES.includes(kind) && value !== null && typeof value !== 'object'
        ? ['valueString', String(value)]
        : wrong();
    case 'url':
      return kind === 'string' && typeof value === 'string' ? ['valueUri', value] : wrong();
    case 'coding':
    case 'choice':
    case 'open-choice': {
      const options = arrayOf<Record<string, unknown>>(item.answerOption)
        .map((o) => (isObject(o) && isObject(o.valueCoding) ? (o.valueCoding as Coding) : undefined))
        .filter((c): c is Coding => c !== undefined);
      let coding: Coding | undefined;
      if (kind === 'Coding' && isObject(value)) coding = value as Coding;
      else if (kind === 'CodeableConcept' && isObject(value)) coding = arrayOf<Coding>(value.coding)[0];
      else if (kind === 'string' && typeof value === 'string') {
        coding = options.find((o) => o.code === value);
        if (!coding && item.answerConstraint === 'optionsOrString') return ['valueString', value];
        if (!coding) return `${describeValue(typed)} matches no answerOption code of the item`;
      }
      if (!coding || !isObject(coding)) return wrong();
      // The matching answer option's coding carries its display (and system when the result had none).
      return ['valueCoding', clone(options.find((o) => sameCoding(o, coding)) ?? coding)];
    }
    case 'quantity': {
      if (kind === 'quantity' && isObject(value)) return ['valueQuantity', value];
      if (kind === 'quantity' && typeof value === 'string') {
        const quantity = quantityFromText(value);
        return quantity ? ['valueQuantity', quantity] : wrong();
      }
      if ((kind === 'integer' || kind === 'decimal') && typeof value === 'number') {
        // A bare number takes the item's unit (questionnaire-unit), when it names one.
        const unit = extensionsOf(item, POPULATE_EXTENSIONS.unit)[0]?.ext.valueCoding;
        const coding = isObject(unit) ? (unit as Coding) : undefined;
        return [
          'valueQuantity',
          {
            value,
            ...(coding?.display || coding?.code ? { unit: coding.display ?? coding.code } : {}),
            ...(coding?.system ? { system: coding.system } : {}),
            ...(coding?.code ? { code: coding.code } : {}),
          },
        ];
      }
      return wrong();
    }
    case 'reference':
      if (kind === 'Reference' && isObject(value)) return ['valueReference', value];
      if (kind === 'resource' && isObject(value) && typeof value.id === 'string')
        return ['valueReference', { reference: `${value.resourceType}/${value.id}` }];
      if (
        kind === 'string' &&
        typeof value === 'string' &&
        /^[A-Z][A-Za-z]+\/[A-Za-z0-9\-.]{1,64}$/.test(value)
      )
        return ['valueReference', { reference: value }];
      return wrong();
    case 'attachment':
      return kind === 'Attachment' && isObject(value) ? ['valueAttachment', value] : wrong();
    default:
      return `${article(item.type)} item takes no answers`;
  }
};

/** Is the answer allowed by the item's answerOption list (R5 answerConstraint, default optionsOnly)? */
const admittedByOptions = (item: QuestionnaireItem, [key, value]: [string, unknown]): boolean => {
  const options = arrayOf<Record<string, unknown>>(item.answerOption).filter(isObject);
  if (options.length === 0 || (item.answerConstraint ?? 'optionsOnly') !== 'optionsOnly') return true;
  return options.some((option) => {
    const own = valueXOf(option);
    if (!own || own[0] !== key) return false;
    if (key === 'valueCoding') return sameCoding(own[1] as Coding, value as Coding);
    if (key === 'valueReference')
      return (own[1] as { reference?: string }).reference === (value as { reference?: string }).reference;
    return JSON.stringify(own[1]) === JSON.stringify(value);
  });
};

/* ------------------------------------------------------------------------ populate --- */

/**
 * SDC $populate (docs/interface.md §4.4; SDC IG "Expression-based population"): builds the initial
 * QuestionnaireResponse of `questionnaire`.
 *
 * - The response: `status` `in-progress`; `questionnaire` = `url|version` (or `url`) when the
 *   Questionnaire has a url; `subject` from `input.subject`, else the `subject`/`patient` context
 *   resource; `encounter`/`author` from the `encounter`/`user` context resources. Every non-display
 *   item is mirrored (linkId, definition, text), groups with their children, a question's children
 *   under each of its answers (dropped when it has none).
 * - Context: each `context` part is `%<name>`; a declared launchContext takes the part of its name,
 *   or `subject` for `patient` (docs/interface.md §4.4 names vs SDC codes). Root `variable`s are evaluated in
 *   order (a supplied context of the same name wins); item `variable`s for the item and below.
 * - Answers: `initialExpression` (converted to the item's answer type), else `initial.value[x]`,
 *   else the answerOptions with `initialSelected`. A repeating group with `itemPopulationContext`
 *   is repeated per element of its result, bound to `%<expression name>` below it.
 *   `calculatedExpression`s then run over the response being built until it is stable.
 * - Expressions are evaluated on the response item they belong to (`QuestionnaireResponse.item`,
 *   root ones on the response) with `%resource` (the response), `%questionnaire`, `%qitem`.
 *
 * Never throws for content problems: a failing expression, a wrong-typed or surplus value, an
 * unsupported language or a missing/mistyped launch context is a `warning` issue whose `expression`
 * is the Questionnaire element (`Questionnaire.item[2].item[0]`, `Questionnaire.extension[1]`).
 * Output is deterministic for the same input (and `now`).
 */
export const populate = async (input: PopulateInput): Promise<PopulateResult> => {
  const { questionnaire } = input;
  const options = {
    ...(input.now ? { now: input.now } : {}),
    ...(input.budget ? { budget: input.budget } : {}),
  };
  const issues = new Issues();
  const contexts = new Map<string, Json>();
  for (const { name, content } of input.context) if (!contexts.has(name)) contexts.set(name, content);
  const contextNamed = (name: string): Json | undefined =>
    contexts.get(name) ??
    [...contexts.entries()].find(
      ([given]) => Object.hasOwn(LAUNCH_ALIASES, given) && LAUNCH_ALIASES[given] === name,
    )?.[1];

  const referenceTo = (resource: Json | undefined): { reference: string } | undefined =>
    resource && typeof resource.resourceType === 'string' && typeof resource.id === 'string'
      ? { reference: `${resource.resourceType}/${resource.id}` }
      : undefined;
  const subject = input.subject?.reference
    ? { reference: input.subject.reference }
    : referenceTo(contexts.get('subject') ?? contexts.get('patient'));
  const encounter = referenceTo(contexts.get('encounter'));
  const author = referenceTo(contexts.get('user'));
  // QuestionnaireResponse.questionnaire is 1..1 (R5): the canonical, else the stored Questionnaire
  // (an inline one with neither: the form backend contains it, issue 13).
  const canonical =
    typeof questionnaire.url === 'string'
      ? typeof questionnaire.version === 'string'
        ? `${questionnaire.url}|${questionnaire.version}`
        : questionnaire.url
      : input.questionnaireReference;
  const response: QuestionnaireResponse = {
    resourceType: 'QuestionnaireResponse',
    ...(canonical !== undefined ? { questionnaire: canonical } : {}),
    status: 'in-progress',
    ...(subject ? { subject } : {}),
    ...(encounter ? { encounter } : {}),
    ...(author ? { author } : {}),
  };

  // --- launch contexts (SDC sdc-questionnaire-launchContext) ---
  // No prototype: a context named `__proto__` or `constructor` is a name like any other.
  const launch: FhirPathEnv = Object.create(null);
  for (const [name, content] of contexts) launch[name] = content;
  for (const [given, alias] of Object.entries(LAUNCH_ALIASES))
    if (contexts.has(given) && !contexts.has(alias)) launch[alias] = contexts.get(given);
  for (const { ext, index } of extensionsOf(questionnaire, POPULATE_EXTENSIONS.launchContext)) {
    const path = `Questionnaire.extension[${index}]`;
    const parts = arrayOf<Extension>(ext.extension).filter(isObject);
    const nameExt = parts.find((p) => p.url === 'name');
    const name = isObject(nameExt?.valueCoding)
      ? (nameExt.valueCoding as Coding).code
      : ((nameExt?.valueId ?? nameExt?.valueCode ?? nameExt?.valueString) as string | undefined);
    if (typeof name !== 'string' || !name) {
      issues.add('invalid', 'a launchContext without a name is ignored', path);
      continue;
    }
    const types = parts.filter((p) => p.url === 'type').map((p) => p.valueCode);
    const content = contextNamed(name);
    if (!content) {
      issues.add(
        'not-found',
        `launch context %${name} was not supplied (pass a context part named ${name === 'patient' ? "'subject' or 'patient'" : `'${name}'`}); expressions using it find nothing`,
        path,
      );
      launch[name] = [];
    } else if (types.length > 0 && !types.includes(content.resourceType)) {
      issues.add(
        'value',
        `launch context %${name} must be a ${types.join(' or ')}, not ${String(content.resourceType)}; it is ignored`,
        path,
      );
      launch[name] = [];
    } else launch[name] = content;
  }

  // --- expressions ---
  /** Evaluates one Expression; undefined after recording a warning. */
  const evaluate = (
    extName: string,
    expr: ValueExpression | undefined,
    focus: { node: unknown; base?: string },
    env: FhirPathEnv,
    path: string,
    sink: Issues,
  ): TypedValue[] | undefined => {
    if (!expr || typeof expr.expression !== 'string' || !expr.expression.trim()) {
      sink.add('invalid', `${extName} has no valueExpression.expression; it is ignored`, path);
      return undefined;
    }
    if (expr.language !== undefined && expr.language !== 'text/fhirpath') {
      sink.add(
        'not-supported',
        `${extName} in language ${expr.language} is not supported (only text/fhirpath); it is ignored`,
        path,
      );
      return undefined;
    }
    try {
      return evaluateFhirPathTyped(
        focus.node,
        expr.expression,
        { ...env, resource: response, questionnaire },
        {
          ...options,
          ...(focus.base ? { base: focus.base } : {}),
        },
      );
    } catch (error) {
      const message = error instanceof FhirPathError ? error.message : String(error);
      sink.add('processing', `${extName} '${expr.expression}' failed: ${message}`, path);
      return undefined;
    }
  };

  /** Evaluates the `variable` extensions of `element` in order into a new environment. */
  const withVariables = (
    element: { extension?: unknown },
    pathOf: (index: number) => string,
    focus: { node: unknown; base?: string },
    env: FhirPathEnv,
    sink: Issues,
    supplied: ReadonlySet<string> = new Set(),
  ): FhirPathEnv => {
    const scope = { ...env };
    for (const { ext, index } of extensionsOf(element, POPULATE_EXTENSIONS.variable)) {
      const expr = valueExpressionOf(ext);
      const path = pathOf(index);
      if (!expr?.name) {
        sink.add('invalid', 'a variable without a name is ignored', path);
        continue;
      }
      if (supplied.has(expr.name)) continue; // SDC $populate: a context part may supply a root variable.
      const result = evaluate(`variable %${expr.name}`, expr, focus, scope, path, sink);
      scope[expr.name] = result ? result.map((r) => r.raw) : [];
    }
    return scope;
  };

  /** The answers of `values` for `item`, with warnings for the ones that do not fit. */
  const toAnswers = (
    extName: string,
    item: QuestionnaireItem,
    values: TypedValue[],
    path: string,
    sink: Issues,
  ): Answer[] => {
    const answers: Answer[] = [];
    for (const typed of values) {
      const converted = toAnswerValue(item, typed);
      if (typeof converted === 'string') {
        sink.add('value', `${extName} of item '${item.linkId}': ${converted}; the value is ignored`, path);
        continue;
      }
      if (!admittedByOptions(item, converted)) {
        sink.add(
          'value',
          `${extName} of item '${item.linkId}': ${describeValue(typed)} is not one of the item's answerOptions; the value is ignored`,
          path,
        );
        continue;
      }
      answers.push({ [converted[0]]: clone(converted[1]) });
    }
    if (!item.repeats && answers.length > 1) {
      sink.add(
        'value',
        `${extName} of item '${item.linkId}' gave ${answers.length} values but the item does not repeat; the first is used`,
        path,
      );
      return answers.slice(0, 1);
    }
    return answers;
  };

  const staticAnswers = (item: QuestionnaireItem): Answer[] => {
    const fromInitial = arrayOf<Record<string, unknown>>(item.initial)
      .filter(isObject)
      .map(valueXOf)
      .filter((v): v is [string, unknown] => v !== undefined);
    const fromOptions = arrayOf<Record<string, unknown>>(item.answerOption)
      .filter((o) => isObject(o) && o.initialSelected === true)
      .map(valueXOf)
      .filter((v): v is [string, unknown] => v !== undefined);
    const values = fromInitial.length > 0 ? fromInitial : fromOptions;
    return (item.repeats ? values : values.slice(0, 1)).map(([key, value]) => ({ [key]: clone(value) }));
  };

  const rootFocus = { node: response };
  const suppliedNames = new Set(contexts.keys());
  const rootEnv = withVariables(
    questionnaire,
    (i) => `Questionnaire.extension[${i}]`,
    rootFocus,
    launch,
    issues,
    suppliedNames,
  );

  /** Builds the response items of `qItems` into `out`, returning their nodes. */
  const build = (
    qItems: unknown,
    parentPath: string,
    out: QuestionnaireResponseItem[],
    env: FhirPathEnv,
  ): Node[] => {
    const nodes: Node[] = [];
    arrayOf<QuestionnaireItem>(qItems).forEach((qItem, index) => {
      const path = `${parentPath}.item[${index}]`;
      if (!isObject(qItem) || typeof qItem.linkId !== 'string') {
        issues.add('invalid', 'an item without a linkId is skipped', path);
        return;
      }
      if (qItem.type === 'display') return;
      for (const instance of instancesOf(qItem, path, env)) {
        const qrItem: QuestionnaireResponseItem = {
          linkId: qItem.linkId,
          ...(typeof qItem.definition === 'string' ? { definition: qItem.definition } : {}),
          ...(typeof qItem.text === 'string' ? { text: qItem.text } : {}),
        } as QuestionnaireResponseItem;
        out.push(qrItem);
        const focus = { node: qrItem, base: 'QuestionnaireResponse.item' };
        const scope = withVariables(
          qItem,
          (i) => `${path}.extension[${i}]`,
          focus,
          { ...env, ...instance, qitem: qItem },
          issues,
        );
        const node: Node = { qItem, path, qrItem, binding: instance, children: [] };
        nodes.push(node);
        if (qItem.type === 'group') {
          if (extensionsOf(qItem, POPULATE_EXTENSIONS.initialExpression).length > 0)
            issues.add(
              'not-supported',
              `group '${qItem.linkId}' takes no initialExpression; it is ignored`,
              path,
            );
          const children: QuestionnaireResponseItem[] = [];
          node.children.push(...build(qItem.item, path, children, scope));
          if (children.length > 0) qrItem.item = children;
          continue;
        }
        const answers = initialAnswers(qItem, path, focus, scope);
        if (answers.length === 0) continue;
        qrItem.answer = answers;
        if (arrayOf(qItem.item).length > 0)
          for (const answer of answers) {
            const children: QuestionnaireResponseItem[] = [];
            node.children.push(...build(qItem.item, path, children, scope));
            if (children.length > 0) answer.item = children;
          }
      }
    });
    return nodes;
  };

  /** One environment binding per instance of the item: one, or one per itemPopulationContext element. */
  const instancesOf = (qItem: QuestionnaireItem, path: string, env: FhirPathEnv): FhirPathEnv[] => {
    const [first] = extensionsOf(qItem, POPULATE_EXTENSIONS.itemPopulationContext);
    if (!first) return [{}];
    if (qItem.type !== 'group') {
      issues.add(
        'not-supported',
        `itemPopulationContext is only used on groups; ignored on ${qItem.type} item '${qItem.linkId}'`,
        path,
      );
      return [{}];
    }
    const expr = valueExpressionOf(first.ext);
    const result = evaluate(
      'itemPopulationContext',
      expr,
      { node: response },
      { ...env, qitem: qItem },
      path,
      issues,
    );
    const name = expr?.name;
    if (!name) issues.add('invalid', `itemPopulationContext of group '${qItem.linkId}' has no name`, path);
    const bind = (elements: unknown[]): FhirPathEnv => (name ? { [name]: elements } : {});
    if (!result || result.length === 0) return [bind([])];
    if (!qItem.repeats) {
      if (result.length > 1)
        issues.add(
          'value',
          `itemPopulationContext of group '${qItem.linkId}' gave ${result.length} elements but the group does not repeat; the first is used`,
          path,
        );
      return [bind([result[0]!.raw])];
    }
    return result.map((r) => bind([r.raw]));
  };

  const initialAnswers = (
    qItem: QuestionnaireItem,
    path: string,
    focus: { node: unknown; base?: string },
    env: FhirPathEnv,
  ): Answer[] => {
    const [initial] = extensionsOf(qItem, POPULATE_EXTENSIONS.initialExpression);
    if (initial) {
      const result = evaluate('initialExpression', valueExpressionOf(initial.ext), focus, env, path, issues);
      const answers = result ? toAnswers('initialExpression', qItem, result, path, issues) : [];
      if (answers.length > 0) return answers;
    }
    return staticAnswers(qItem);
  };

  const rootItems: QuestionnaireResponseItem[] = [];
  response.item = rootItems;
  const tree = build(questionnaire.item, 'Questionnaire', rootItems, rootEnv);

  // --- calculations (SDC sdc-questionnaire-calculatedExpression) ---
  const hasCalculation = (nodes: Node[]): boolean =>
    nodes.some(
      (n) =>
        extensionsOf(n.qItem, POPULATE_EXTENSIONS.calculatedExpression).length > 0 ||
        hasCalculation(n.children),
    );
  if (hasCalculation(tree)) {
    let round = new Issues();
    let stable = false;
    for (let i = 0; i < MAX_CALCULATION_ROUNDS && !stable; i++) {
      round = new Issues();
      const before = JSON.stringify(response);
      const env = withVariables(
        questionnaire,
        (k) => `Questionnaire.extension[${k}]`,
        rootFocus,
        launch,
        round,
        suppliedNames,
      );
      calculate(tree, env, round);
      stable = JSON.stringify(response) === before;
    }
    issues.addAll(round);
    if (!stable)
      issues.add(
        'processing',
        `calculatedExpressions did not settle after ${MAX_CALCULATION_ROUNDS} rounds; the last values are kept`,
        'Questionnaire',
      );
  }

  function calculate(nodes: Node[], env: FhirPathEnv, sink: Issues): void {
    for (const node of nodes) {
      const focus = { node: node.qrItem, base: 'QuestionnaireResponse.item' };
      const scope = withVariables(
        node.qItem,
        (i) => `${node.path}.extension[${i}]`,
        focus,
        { ...env, ...node.binding, qitem: node.qItem },
        sink,
      );
      const [calculated] = extensionsOf(node.qItem, POPULATE_EXTENSIONS.calculatedExpression);
      if (calculated && node.qItem.type !== 'group') {
        const result = evaluate(
          'calculatedExpression',
          valueExpressionOf(calculated.ext),
          focus,
          scope,
          node.path,
          sink,
        );
        if (result) {
          const answers = toAnswers('calculatedExpression', node.qItem, result, node.path, sink);
          if (answers.length > 0) node.qrItem.answer = answers;
          else delete node.qrItem.answer;
        }
      }
      calculate(node.children, scope, sink);
    }
  }

  // Issue 13: an optional group with no answer anywhere beneath it is left out (an empty instance
  // would make $validate warn about its required children; the editor shows an empty group anyway).
  const questionOf = new Map<QuestionnaireResponseItem, QuestionnaireItem>();
  const index = (nodes: Node[]): void => {
    for (const n of nodes) {
      questionOf.set(n.qrItem, n.qItem);
      index(n.children);
    }
  };
  index(tree);
  const prunedRoot = pruneEmptyGroups(rootItems, (item) => {
    const q = questionOf.get(item);
    return q?.type === 'group' && q.required !== true;
  });
  if (prunedRoot.length === 0) delete response.item;
  else response.item = prunedRoot;
  return { response, issues: { resourceType: 'OperationOutcome', issue: issues.list() } };
};

/** Whether a response item holds an answer, itself or in any item beneath it. */
const answeredBeneath = (item: QuestionnaireResponseItem): boolean =>
  arrayOf<Answer>(item.answer).length > 0 ||
  arrayOf<QuestionnaireResponseItem>(item.item).some(answeredBeneath);

/**
 * `items` without the items that `optional` accepts and that hold no answer beneath them, at every
 * level (nested items and items under answers); an emptied `item` list is removed, never left `[]`.
 */
const pruneEmptyGroups = (
  items: QuestionnaireResponseItem[],
  optional: (item: QuestionnaireResponseItem) => boolean,
): QuestionnaireResponseItem[] =>
  items
    .filter((item) => !(optional(item) && !answeredBeneath(item)))
    .map((item) => {
      const nested = item as { item?: QuestionnaireResponseItem[] };
      if (nested.item) {
        const kept = pruneEmptyGroups(nested.item, optional);
        if (kept.length > 0) nested.item = kept;
        else delete nested.item;
      }
      for (const answer of arrayOf<Answer & { item?: QuestionnaireResponseItem[] }>(item.answer))
        if (answer.item) {
          const kept = pruneEmptyGroups(answer.item, optional);
          if (kept.length > 0) answer.item = kept;
          else delete answer.item;
        }
      return item;
    });
