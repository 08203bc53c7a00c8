/**
 * SDC expression-based population (issue 4; docs/interface.md §4.4 `POST /Questionnaire/$populate`; SDC IG
 * "Form Population", http://hl7.org/fhir/uv/sdc/populate.html): from a Questionnaire and the launch
 * context resources, an `in-progress` QuestionnaireResponse that mirrors the form with its initial
 * answers. Pure apart from the optional canonical resolver; every FHIRPath goes through
 * src/sdc/fhirpath.ts. An expression that fails or answers the wrong type is a warning in
 * `issues`, never a failure.
 */
import {
  type ComputedAnswers,
  type ComputedOption,
  computeAnswers,
  isComputedOption,
  optionText,
} from './answer-expression.js';
import type { EvaluationBudget } from './budget.js';
import { answersFromResults, valueXOf } from './engine/answers.js';
import {
  EXT_ANSWER_EXPRESSION,
  EXT_CALCULATED_EXPRESSION,
  EXT_CANDIDATE_EXPRESSION,
  EXT_INITIAL_EXPRESSION,
  EXT_ITEM_POPULATION_CONTEXT,
  EXT_LAUNCH_CONTEXT,
  EXT_UNIT,
  EXT_VARIABLE,
} from './engine/extensions.js';
import { defineForm, runForm } from './engine/index.js';
import { answerKeyOf, syntaxProblem } from './engine/values.js';
import { membersOf, resolveAnswerValueSets } from './engine/valuesets.js';
import {
  FhirQueryError,
  type FhirQueryRunner,
  QueryBudget,
  runFhirQuery,
  X_FHIR_QUERY,
} from './fhir-query.js';
import {
  evaluateFhirPath,
  evaluateFhirPathTyped,
  expressionReferences,
  type FhirPathEnv,
  FhirPathError,
  type TypedValue,
} from './fhirpath.js';
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

/** The extensions $populate reads (SDC IG "Expression-based population", "Calculations"). */
export const POPULATE_EXTENSIONS = {
  launchContext: EXT_LAUNCH_CONTEXT,
  sourceQueries: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-sourceQueries',
  variable: EXT_VARIABLE,
  initialExpression: EXT_INITIAL_EXPRESSION,
  itemPopulationContext: EXT_ITEM_POPULATION_CONTEXT,
  calculatedExpression: EXT_CALCULATED_EXPRESSION,
  unit: EXT_UNIT,
} as const;

/**
 * Context names of docs/interface.md §4.4 that differ from the SDC launch context codes
 * (http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext): the spec's `subject` is SDC's `patient`.
 */
const LAUNCH_ALIASES: Readonly<Record<string, string>> = { subject: 'patient' };

/** The input of {@link populate}. */
export interface PopulateInput {
  readonly questionnaire: Questionnaire;
  /**
   * `Questionnaire/<id>` of a stored Questionnaire: the response's `questionnaire` when the
   * Questionnaire has no `url` (issue 13: `questionnaire` is 1..1 in R5).
   */
  readonly questionnaireReference?: string;
  /**
   * The response's subject, a Reference copied as it is (another server's absolute reference
   * included); without it, the `subject`/`patient` context resource's `Type/id`.
   */
  readonly subject?: Json;
  /** Launch contexts and supplied variables (SDC $populate `context`: `name` + `content`). */
  readonly context: { name: string; content: Json }[];
  /** Resolves the items' answerValueSets (codes become Codings through them). */
  readonly resolve?: CanonicalResolver;
  /**
   * Runs the searches of `x-fhir-query` expressions (src/sdc/fhir-query.ts); without it such
   * expressions are reported as not supported.
   */
  readonly query?: FhirQueryRunner;
  /** The request's query budget (time and number of queries), apart from FHIRPath's. */
  readonly queryBudget?: QueryBudget;
  /** The server's own FHIR base URLs: a query may be absolute under one of them. */
  readonly fhirBases?: readonly string[];
  /** What `now()`/`today()` answer; the wall clock without it. */
  readonly now?: Date;
  /** The request's evaluation budget (src/sdc/budget.ts), shared by every expression. */
  readonly budget?: EvaluationBudget;
}

/** The output of {@link populate}: the response and the warnings met while building it. */
export interface PopulateResult {
  readonly response: QuestionnaireResponse;
  readonly issues: OperationOutcome;
  /**
   * The candidates of each item with a candidateExpression (SDC population: offered to the person
   * filling the form, none answered), by linkId; also reported as `information` issues.
   */
  readonly candidates: ReadonlyMap<string, readonly ComputedOption[]>;
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

/** Collects warnings in order, once each. */
class Issues {
  private readonly seen = new Map<string, OperationOutcomeIssue>();
  add(
    code: string,
    diagnostics: string,
    expression: string,
    severity: OperationOutcomeIssue['severity'] = 'warning',
  ): void {
    const issue: OperationOutcomeIssue = { severity, code, diagnostics, expression: [expression] };
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
 *   `calculatedExpression`s then run once each, dependencies first, by the form engine
 *   (src/sdc/engine/calculate.ts; a calculation on a cycle is not evaluated and is reported).
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
  const subject = input.subject
    ? clone(input.subject)
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
  const launch: FhirPathEnv = {};
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
        expr.language === X_FHIR_QUERY
          ? `${extName} can't be an ${X_FHIR_QUERY} (only a variable, itemPopulationContext or sourceQueries can); it is ignored`
          : `${extName} in language ${expr.language} is not supported (only text/fhirpath); it is ignored`,
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

  // --- x-fhir-query (issue 35): searches of casebook's own data, within the query budget ---
  const queryBudget = input.queryBudget ?? new QueryBudget();
  /** Variables whose query was not run for want of budget: the items using them are named. */
  const unfunded = new Map<string, string>();
  /**
   * Does `expression` read a variable whose query was not run for want of budget (or one computed
   * from such a variable)? Its result would be built on nothing — a count of 0 where nothing was
   * counted — so it is not evaluated (issue 35: the items are named instead, {@link reportUnfilled}).
   */
  const derivedUnfunded = new Set<string>();
  const readsUnfunded = (expression: string | undefined): boolean =>
    typeof expression === 'string' &&
    (unfunded.size > 0 || derivedUnfunded.size > 0) &&
    expressionReferences(expression).variables.some((v) => unfunded.has(v) || derivedUnfunded.has(v));

  /**
   * Runs one x-fhir-query (its `{{…}}` evaluated on `focus`/`env`) and answers its searchset
   * Bundle; undefined after recording an issue (not supported, out of budget, failed).
   */
  const runQuery = async (
    label: string,
    template: string,
    focus: { node: unknown; base?: string },
    env: FhirPathEnv,
    path: string,
    sink: Issues,
    variable?: string,
  ): Promise<Json | undefined> => {
    if (!input.query) {
      sink.add('not-supported', `${label}: ${X_FHIR_QUERY} is not supported here; it is ignored`, path);
      return undefined;
    }
    try {
      return await runFhirQuery(
        { query: input.query, budget: queryBudget, bases: input.fhirBases ?? [] },
        template,
        (expression) =>
          memberPath(expression, env) ??
          evaluateFhirPath(
            focus.node,
            expression,
            { ...env, resource: response, questionnaire },
            { ...options, ...(focus.base ? { base: focus.base } : {}) },
          ),
      );
    } catch (error) {
      if (error instanceof FhirQueryError) {
        if (error.code === 'too-costly' && variable) unfunded.set(variable, path);
        sink.add(error.code, `${label}: ${error.message}`, path);
      } else if (error instanceof FhirPathError)
        sink.add(
          'processing',
          `${label}: an embedded expression of '${template}' failed: ${error.message}`,
          path,
        );
      else throw error;
      return undefined;
    }
  };

  /** Evaluates the `variable` extensions of `element` in order into a new environment. */
  const withVariables = async (
    element: { extension?: unknown },
    pathOf: (index: number) => string,
    focus: { node: unknown; base?: string },
    env: FhirPathEnv,
    sink: Issues,
    supplied: ReadonlySet<string> = new Set(),
  ): Promise<FhirPathEnv> => {
    const scope = { ...env };
    for (const { ext, index } of extensionsOf(element, POPULATE_EXTENSIONS.variable)) {
      const expr = valueExpressionOf(ext);
      const path = pathOf(index);
      if (!expr?.name) {
        sink.add('invalid', 'a variable without a name is ignored', path);
        continue;
      }
      if (supplied.has(expr.name)) continue; // SDC $populate: a context part may supply a root variable.
      if (expr.language === X_FHIR_QUERY && typeof expr.expression === 'string') {
        const bundle = await runQuery(
          `variable %${expr.name}`,
          expr.expression,
          focus,
          scope,
          path,
          sink,
          expr.name,
        );
        scope[expr.name] = bundle ? [bundle] : [];
        continue;
      }
      if (readsUnfunded(expr.expression)) {
        derivedUnfunded.add(expr.name);
        scope[expr.name] = [];
        continue;
      }
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
    const { answers, problems } = answersFromResults(extName, item, values);
    for (const problem of problems) sink.add(problem.code, problem.diagnostics, path);
    return answers;
  };

  /**
   * `initial.value[x]`, else the answerOptions with `initialSelected`: each checked against the
   * item's type (its answer key, and the value's FHIR syntax); one that does not fit is left out
   * with an issue, so the response $validate then accepts is what $populate produced (issue 35).
   */
  const staticAnswers = (item: QuestionnaireItem, path: string): Answer[] => {
    const fromInitial = arrayOf<Record<string, unknown>>(item.initial)
      .filter(isObject)
      .map(valueXOf)
      .filter((v): v is [string, unknown] => v !== undefined);
    const fromOptions = arrayOf<Record<string, unknown>>(item.answerOption)
      .filter((o) => isObject(o) && o.initialSelected === true)
      .map(valueXOf)
      .filter((v): v is [string, unknown] => v !== undefined);
    const what = fromInitial.length > 0 ? 'initial' : 'answerOption (initialSelected)';
    const expected = answerKeyOf(item.type);
    const openString = item.answerConstraint === 'optionsOrString' || item.type === 'open-choice';
    const values = (fromInitial.length > 0 ? fromInitial : fromOptions).filter(([key, value]) => {
      if (expected && key !== expected && !(openString && key === 'valueString')) {
        issues.add(
          'value',
          `${what} ${key} of item '${item.linkId}' does not fit its type ${item.type} (answers are ${expected}); the value is ignored`,
          path,
        );
        return false;
      }
      const syntax = syntaxProblem(key, value);
      if (syntax) {
        issues.add('value', `${what} ${key} of item '${item.linkId}' ${syntax}; the value is ignored`, path);
        return false;
      }
      return true;
    });
    if (!item.repeats && values.length > 1)
      issues.add(
        'value',
        `item '${item.linkId}' does not repeat but has ${values.length} initial values; the first is used`,
        path,
      );
    return (item.repeats ? values : values.slice(0, 1)).map(([key, value]) => ({ [key]: clone(value) }));
  };

  // Codes of answerValueSets (issue 35): a code or a display-less Coding becomes the ValueSet's Coding.
  const valueSetCodings = new Map<string, Coding[]>();
  for (const [canonical, valueSet] of await resolveAnswerValueSets(questionnaire, input.resolve))
    valueSetCodings.set(
      canonical,
      membersOf(valueSet).codes.map((c) => ({
        ...(c.system !== undefined ? { system: c.system } : {}),
        code: c.code,
        ...(c.display !== undefined ? { display: c.display } : {}),
      })),
    );
  /** Expression results of a coded item with an answerValueSet (and no answerOption), as its Codings. */
  const throughValueSet = (item: QuestionnaireItem, values: TypedValue[]): TypedValue[] => {
    const codings =
      typeof item.answerValueSet === 'string' && arrayOf(item.answerOption).length === 0
        ? valueSetCodings.get(item.answerValueSet)
        : undefined;
    if (!codings) return values;
    return values.map((typed) => {
      const code =
        typeof typed.value === 'string'
          ? { code: typed.value }
          : isObject(typed.value) && typed.type.endsWith('Coding')
            ? (typed.value as Coding)
            : undefined;
      if (!code) return typed;
      const found = codings.find(
        (c) => c.code === code.code && (code.system === undefined || c.system === code.system),
      );
      return found
        ? {
            type: 'FHIR.Coding',
            value: { ...found, ...code, ...(found.display ? { display: found.display } : {}) },
            raw: found,
          }
        : typed;
    });
  };

  const rootFocus = { node: response };
  const suppliedNames = new Set(contexts.keys());
  // sourceQueries (SDC): a contained batch Bundle of searches; its batch-response is %<Bundle id>.
  for (const { ext, index } of extensionsOf(questionnaire, POPULATE_EXTENSIONS.sourceQueries)) {
    const path = `Questionnaire.extension[${index}]`;
    const target = isObject(ext.valueReference) ? ext.valueReference.reference : undefined;
    const batch =
      typeof target === 'string' && target.startsWith('#')
        ? arrayOf<Json>(questionnaire.contained).find(
            (c) => isObject(c) && c.resourceType === 'Bundle' && `#${String(c.id)}` === target,
          )
        : undefined;
    if (!batch || typeof batch.id !== 'string') {
      issues.add(
        'not-found',
        `sourceQueries must reference a contained Bundle (#id), not ${JSON.stringify(target ?? null)}; it is ignored`,
        path,
      );
      continue;
    }
    if (suppliedNames.has(batch.id)) continue;
    const results: Json[] = [];
    for (const [i, entry] of arrayOf<Json>(batch.entry).entries()) {
      const request = isObject(entry) && isObject(entry.request) ? entry.request : undefined;
      const url = typeof request?.url === 'string' ? request.url : undefined;
      if (!url || (request?.method !== undefined && request.method !== 'GET')) {
        issues.add(
          'not-supported',
          `sourceQueries ${target} entry ${i}: only GET searches are run; it answers nothing`,
          path,
        );
        results.push({ response: { status: '400 Bad Request' } });
        continue;
      }
      const bundle = await runQuery(
        `sourceQueries ${target} entry ${i}`,
        url,
        rootFocus,
        launch,
        path,
        issues,
        batch.id,
      );
      results.push(
        bundle
          ? { resource: bundle, response: { status: '200 OK' } }
          : { response: { status: '400 Bad Request' } },
      );
    }
    launch[batch.id] = [{ resourceType: 'Bundle', type: 'batch-response', entry: results }];
  }
  const rootEnv = await withVariables(
    questionnaire,
    (i) => `Questionnaire.extension[${i}]`,
    rootFocus,
    launch,
    issues,
    suppliedNames,
  );

  // answerExpression and candidateExpression (issue 35; SDC "Expressions"): computed once, on the
  // response root with the launch contexts and root variables, queries within the same budget.
  const computeOptions = {
    response: response as Json,
    environment: rootEnv,
    ...(input.query
      ? { queries: { query: input.query, budget: queryBudget, bases: input.fhirBases ?? [] } }
      : {}),
    ...options,
  };
  const permitted = await computeAnswers(questionnaire, EXT_ANSWER_EXPRESSION, computeOptions);
  const candidates = await computeAnswers(questionnaire, EXT_CANDIDATE_EXPRESSION, computeOptions);
  const reportComputed = (computed: ComputedAnswers) => {
    for (const issue of computed.issues)
      issues.add(issue.code, issue.diagnostics ?? '', issue.expression?.[0] ?? 'Questionnaire');
  };
  reportComputed(permitted);
  reportComputed(candidates);
  /** Answers an answerExpression does not permit are left out (as answerOption does, issue 35). */
  const permittedAnswers = (item: QuestionnaireItem, answers: Answer[], path: string): Answer[] => {
    const list = permitted.options.get(item.linkId);
    if (!list) return answers;
    return answers.filter((answer) => {
      if (isComputedOption(list, answer as Record<string, unknown>)) return true;
      issues.add(
        'value',
        `the initial value ${optionText(answer as ComputedOption)} of item '${item.linkId}' is not one of the answers its answerExpression permits; the value is ignored`,
        path,
      );
      return false;
    });
  };

  /** Builds the response items of `qItems` into `out`, returning their nodes. */
  const build = async (
    qItems: unknown,
    parentPath: string,
    out: QuestionnaireResponseItem[],
    env: FhirPathEnv,
  ): Promise<Node[]> => {
    const nodes: Node[] = [];
    for (const [index, qItem] of arrayOf<QuestionnaireItem>(qItems).entries()) {
      const path = `${parentPath}.item[${index}]`;
      if (!isObject(qItem) || typeof qItem.linkId !== 'string') {
        issues.add('invalid', 'an item without a linkId is skipped', path);
        continue;
      }
      if (qItem.type === 'display') continue;
      for (const instance of await instancesOf(qItem, path, env)) {
        const qrItem: QuestionnaireResponseItem = {
          linkId: qItem.linkId,
          ...(typeof qItem.definition === 'string' ? { definition: qItem.definition } : {}),
          ...(typeof qItem.text === 'string' ? { text: qItem.text } : {}),
        } as QuestionnaireResponseItem;
        out.push(qrItem);
        const focus = { node: qrItem, base: 'QuestionnaireResponse.item' };
        const scope = await withVariables(
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
          node.children.push(...(await build(qItem.item, path, children, scope)));
          if (children.length > 0) qrItem.item = children;
          continue;
        }
        const answers = permittedAnswers(qItem, initialAnswers(qItem, path, focus, scope), path);
        if (answers.length === 0) continue;
        qrItem.answer = answers;
        if (arrayOf(qItem.item).length > 0)
          for (const answer of answers) {
            const children: QuestionnaireResponseItem[] = [];
            node.children.push(...(await build(qItem.item, path, children, scope)));
            if (children.length > 0) answer.item = children;
          }
      }
    }
    return nodes;
  };

  /** One environment binding per instance of the item: one, or one per itemPopulationContext element. */
  const instancesOf = async (
    qItem: QuestionnaireItem,
    path: string,
    env: FhirPathEnv,
  ): Promise<FhirPathEnv[]> => {
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
    let result: { raw: unknown }[] | undefined;
    if (expr?.language === X_FHIR_QUERY && typeof expr.expression === 'string') {
      // A query's context elements are the resources it found.
      const bundle = await runQuery(
        `itemPopulationContext of group '${qItem.linkId}'`,
        expr.expression,
        { node: response },
        { ...env, qitem: qItem },
        path,
        issues,
        expr.name,
      );
      result = arrayOf<Json>(bundle?.entry)
        .filter(
          (e) => isObject(e) && isObject(e.resource) && (e.search as Json | undefined)?.mode !== 'include',
        )
        .map((e) => ({ raw: e.resource }));
    } else
      result = evaluate(
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
    if (initial && readsUnfunded(valueExpressionOf(initial.ext)?.expression))
      return staticAnswers(qItem, path);
    if (initial) {
      const result = evaluate('initialExpression', valueExpressionOf(initial.ext), focus, env, path, issues);
      const answers = result
        ? toAnswers('initialExpression', qItem, throughValueSet(qItem, result), path, issues)
        : [];
      if (answers.length > 0) return answers;
    }
    return staticAnswers(qItem, path);
  };

  const rootItems: QuestionnaireResponseItem[] = [];
  response.item = rootItems;
  const tree = await build(questionnaire.item, 'Questionnaire', rootItems, rootEnv);
  reportUnfilled(questionnaire, unfunded, issues);

  // --- calculations (SDC sdc-questionnaire-calculatedExpression), by the form engine ---
  const bindings = new Map<QuestionnaireResponseItem, FhirPathEnv>();
  const bind = (nodes: Node[]): void => {
    for (const n of nodes) {
      if (Object.keys(n.binding).length > 0) bindings.set(n.qrItem, n.binding);
      bind(n.children);
    }
  };
  bind(tree);
  const form = defineForm(questionnaire);
  if (form.items.some((item) => item.calculatedExpression !== undefined)) {
    const run = runForm(form, response, {
      ...options,
      calculate: true,
      environment: launch,
      suppliedVariables: suppliedNames,
      bindingsOf: (item) => bindings.get(item),
    });
    for (const problem of run.problems)
      issues.add(problem.code, problem.diagnostics, problem.questionnairePath ?? problem.expression);
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
  for (const [linkId, list] of candidates.options) {
    const at = questionnairePathOf(questionnaire, linkId);
    issues.add(
      'informational',
      list.length === 0
        ? `item '${linkId}': its candidateExpression offers no candidates`
        : `item '${linkId}': ${list.length} candidate${list.length === 1 ? '' : 's'} offered by its candidateExpression, none answered: ${list
            .slice(0, 10)
            .map(optionText)
            .join('; ')}${list.length > 10 ? '; …' : ''}`,
      at,
      'information',
    );
  }
  return {
    response,
    issues: { resourceType: 'OperationOutcome', issue: issues.list() },
    candidates: candidates.options,
  };
};

/** The FHIRPath of the first item with `linkId` (`Questionnaire.item[1].item[0]`). */
const questionnairePathOf = (questionnaire: Questionnaire, linkId: string): string => {
  const visit = (items: unknown, parent: string): string | undefined => {
    for (const [index, item] of arrayOf<QuestionnaireItem>(items).entries()) {
      if (!isObject(item)) continue;
      const path = `${parent}.item[${index}]`;
      if (item.linkId === linkId) return path;
      const inner = visit(item.item, path);
      if (inner) return inner;
    }
    return undefined;
  };
  return visit(questionnaire.item, 'Questionnaire') ?? 'Questionnaire';
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

/**
 * Names the items a query left out for want of budget could not fill (issue 35): those whose
 * initialExpression, itemPopulationContext, calculatedExpression or variables read one of the
 * unfunded variables.
 */
const reportUnfilled = (
  questionnaire: Questionnaire,
  unfunded: ReadonlyMap<string, string>,
  issues: Issues,
) => {
  if (unfunded.size === 0) return;
  // A root FHIRPath variable computed from an unqueried one is empty too: its readers are named
  // under the query variable it came from.
  const origin = new Map<string, string>([...unfunded.keys()].map((name) => [name, name]));
  for (const { ext } of extensionsOf(questionnaire, POPULATE_EXTENSIONS.variable)) {
    const expr = valueExpressionOf(ext);
    if (!expr?.name || typeof expr.expression !== 'string' || expr.language === X_FHIR_QUERY) continue;
    const from = expressionReferences(expr.expression).variables.find((v) => origin.has(v));
    if (from !== undefined && !origin.has(expr.name)) origin.set(expr.name, origin.get(from)!);
  }
  const dependent = new Map<string, string[]>();
  const visit = (items: unknown) => {
    for (const item of arrayOf<QuestionnaireItem>(items)) {
      if (!isObject(item)) continue;
      const read = new Set(
        arrayOf<Extension>(item.extension)
          .map((e) => (isObject(e) ? valueExpressionOf(e)?.expression : undefined))
          .filter((e): e is string => typeof e === 'string')
          .flatMap((e) => expressionReferences(e).variables),
      );
      const sources = new Set([...read].flatMap((v) => (origin.has(v) ? [origin.get(v)!] : [])));
      for (const name of sources) dependent.set(name, [...(dependent.get(name) ?? []), String(item.linkId)]);
      visit(item.item);
    }
  };
  visit(questionnaire.item);
  for (const [name, path] of unfunded) {
    const items = dependent.get(name) ?? [];
    issues.add(
      'incomplete',
      items.length > 0
        ? `%${name} was not queried (query budget used up): items ${items.map((i) => `'${i}'`).join(', ')} could not be filled from it`
        : `%${name} was not queried (query budget used up)`,
      path,
    );
  }
};

/**
 * `%name.a.b` on a variable holding one JSON object, read without FHIRPath (the `{{%patient.id}}`
 * of nearly every query: no evaluation budget spent on it); undefined for anything else, which
 * FHIRPath then evaluates.
 */
const memberPath = (expression: string, env: FhirPathEnv): unknown[] | undefined => {
  const match = /^%([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)$/.exec(expression.trim());
  if (!match || !Object.hasOwn(env, match[1]!)) return undefined;
  let value: unknown = env[match[1]!];
  if (Array.isArray(value)) value = value.length === 1 ? value[0] : undefined;
  for (const step of match[2]!.slice(1).split('.')) {
    if (!isObject(value) || !Object.hasOwn(value, step)) return undefined;
    value = value[step];
  }
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
    ? [value]
    : undefined;
};
