/**
 * Answers computed at run time (issue 35; docs/interface.md §4.4 "Computed answer lists"; SDC IG
 * "Expressions" — answerExpression — and "Expression-based population" — candidateExpression):
 *
 * - `sdc-questionnaire-answerExpression` on a question gives its permitted answers: the form engine
 *   treats them as it treats answerOption (src/sdc/engine/checks.ts `answerOption`), so $validate
 *   refuses an answer outside them and the editor offers them as its choices.
 * - `sdc-questionnaire-candidateExpression` gives candidates that $populate offers (it reports them)
 *   without answering with them.
 *
 * Both are FHIRPath (`text/fhirpath`) or `application/x-fhir-query`. FHIRPath is evaluated on the
 * response (`%resource`, `%questionnaire`, `%qitem` and the environment: launch contexts and the
 * Questionnaire's root variables) within the request's evaluation budget; a query runs through
 * {@link runFhirQuery} — in-process, under the caller's scopes, at most 50 matches, charged to the
 * request's query budget. Results take the item's answer type (src/sdc/engine/answers.ts
 * `toAnswerValue`: a resource answers a reference item as `Type/id`). Pure apart from the runner.
 */
import { type EvaluationBudget, EvaluationBudgetExceeded } from './budget.js';
import { toAnswerValue } from './engine/answers.js';
import {
  arrayOf,
  EXT_ANSWER_EXPRESSION,
  EXT_CANDIDATE_EXPRESSION,
  expressionOf,
  extensionsOf,
  isObject,
} from './engine/extensions.js';
import { compareValues, describeValue, valueKeys } from './engine/values.js';
import { FhirQueryError, matchesOf, type QueryRun, runFhirQuery, X_FHIR_QUERY } from './fhir-query.js';
import {
  evaluateFhirPath,
  evaluateFhirPathTyped,
  type FhirPathEnv,
  FhirPathError,
  type TypedValue,
} from './fhirpath.js';
import type { Json, OperationOutcomeIssue, Questionnaire, QuestionnaireItem } from './types.js';

/** One computed option: an answerOption-shaped `{ value[x]: … }`. */
export type ComputedOption = Record<string, unknown>;

/** The answer lists computed for a form, by linkId. */
export interface ComputedAnswers {
  /** The options of each item whose expression could be evaluated (possibly none). */
  readonly options: ReadonlyMap<string, readonly ComputedOption[]>;
  /** Items whose expression could not be evaluated, and why (their answers are then not checked). */
  readonly unavailable: ReadonlyMap<string, string>;
  /** Warnings met (an expression failing, a query refused or out of budget, a result of the wrong type). */
  readonly issues: readonly OperationOutcomeIssue[];
}

/** How to compute the lists. */
export interface ComputeOptions {
  /** The response the expressions see as `%resource` (and their focus). */
  readonly response: Json;
  /** Launch contexts and root variables (`%patient`…). */
  readonly environment?: FhirPathEnv;
  /** Runs x-fhir-query; without it a query is reported as not supported and its item unchecked. */
  readonly queries?: QueryRun;
  readonly budget?: EvaluationBudget;
  readonly now?: Date;
}

/** The items of `questionnaire` carrying the extension `url`, with their FHIRPath paths. */
const itemsWith = (
  questionnaire: Questionnaire,
  url: string,
): { item: QuestionnaireItem; path: string }[] => {
  const found: { item: QuestionnaireItem; path: string }[] = [];
  const visit = (items: unknown, parent: string) => {
    for (const [index, item] of arrayOf<QuestionnaireItem>(items).entries()) {
      if (!isObject(item)) continue;
      const path = `${parent}.item[${index}]`;
      if (extensionsOf(item, url).length > 0) found.push({ item, path });
      visit(item.item, path);
    }
  };
  visit(questionnaire.item, 'Questionnaire');
  return found;
};

/** Does the item take its permitted answers from an answerExpression? */
export const hasAnswerExpression = (item: { extension?: unknown }): boolean =>
  extensionsOf(item, EXT_ANSWER_EXPRESSION).length > 0;

/** Does the form have any answerExpression (so a caller knows to compute them)? */
export const usesAnswerExpressions = (questionnaire: Questionnaire): boolean =>
  itemsWith(questionnaire, EXT_ANSWER_EXPRESSION).length > 0;

/**
 * A reference answer's display for a resource: its name, else its code's text or first display
 * (what a person picks from), else nothing.
 */
const displayOf = (resource: Json): string | undefined => {
  const name = arrayOf<Json>(resource.name)[0] ?? (isObject(resource.name) ? resource.name : undefined);
  if (typeof resource.name === 'string') return resource.name;
  if (isObject(name)) {
    if (typeof name.text === 'string') return name.text;
    const parts = [...arrayOf<string>(name.given), ...(typeof name.family === 'string' ? [name.family] : [])];
    if (parts.length > 0) return parts.join(' ');
  }
  for (const key of ['code', 'medicationCodeableConcept']) {
    const concept = resource[key];
    if (!isObject(concept)) continue;
    if (typeof concept.text === 'string') return concept.text;
    const display = arrayOf<Json>(concept.coding).find((c) => isObject(c) && typeof c.display === 'string');
    if (display) return display.display as string;
  }
  return undefined;
};

/**
 * Evaluates the `url` expressions (answerExpression or candidateExpression) of every item of
 * `questionnaire` into answer lists (see the module comment). Never throws for content problems:
 * a failing expression or query is an issue, and the item is `unavailable`.
 * @returns the lists by linkId (duplicate values once, in result order).
 */
export const computeAnswers = async (
  questionnaire: Questionnaire,
  url: typeof EXT_ANSWER_EXPRESSION | typeof EXT_CANDIDATE_EXPRESSION,
  options: ComputeOptions,
): Promise<ComputedAnswers> => {
  const name = url === EXT_ANSWER_EXPRESSION ? 'answerExpression' : 'candidateExpression';
  const lists = new Map<string, ComputedOption[]>();
  const unavailable = new Map<string, string>();
  const issues: OperationOutcomeIssue[] = [];
  const fhirPathOptions = {
    ...(options.budget ? { budget: options.budget } : {}),
    ...(options.now ? { now: options.now } : {}),
  };
  for (const { item, path } of itemsWith(questionnaire, url)) {
    const { ext, index } = extensionsOf(item, url)[0]!;
    const at = `${path}.extension[${index}]`;
    const label = `${name} of item '${item.linkId}'`;
    const fail = (code: string, why: string) => {
      unavailable.set(item.linkId, why);
      issues.push({ severity: 'warning', code, diagnostics: `${label}: ${why}`, expression: [at] });
    };
    if (url === EXT_ANSWER_EXPRESSION && (arrayOf(item.answerOption).length > 0 || item.answerValueSet)) {
      fail(
        'invalid',
        'an item with answerOption or answerValueSet takes no answerExpression (SDC); it is ignored',
      );
      continue;
    }
    // A group's candidates are the resources a person may pick to fill an instance from: offered
    // as references (SDC population, candidateExpression on a group).
    const groupCandidates = item.type === 'group' && url === EXT_CANDIDATE_EXPRESSION;
    if ((item.type === 'group' && !groupCandidates) || item.type === 'display') {
      fail('not-supported', `on a ${item.type} item it is not evaluated`);
      continue;
    }
    const asItem = { ...item, type: groupCandidates ? 'reference' : item.type, answerOption: undefined };
    const expression = expressionOf(ext);
    const env = { ...options.environment, resource: options.response, questionnaire, qitem: item };
    let results: TypedValue[];
    try {
      if (typeof expression?.expression !== 'string' || expression.expression.trim() === '') {
        fail('invalid', 'it has no valueExpression.expression');
        continue;
      }
      if (expression.language === X_FHIR_QUERY) {
        if (!options.queries) {
          fail('not-supported', `${X_FHIR_QUERY} is not run here`);
          continue;
        }
        const bundle = await runFhirQuery(options.queries, expression.expression, (embedded) =>
          evaluateFhirPath(options.response, embedded, env, fhirPathOptions),
        );
        results = matchesOf(bundle).map((resource) => ({
          type: `FHIR.${String(resource.resourceType)}`,
          value: resource,
          raw: resource,
        }));
      } else if (expression.language === undefined || expression.language === 'text/fhirpath') {
        results = evaluateFhirPathTyped(options.response, expression.expression, env, fhirPathOptions);
      } else {
        fail(
          'not-supported',
          `language ${expression.language} is not supported (text/fhirpath, ${X_FHIR_QUERY})`,
        );
        continue;
      }
    } catch (error) {
      if (error instanceof FhirQueryError) fail(error.code, error.message);
      else if (error instanceof FhirPathError || error instanceof EvaluationBudgetExceeded)
        fail('processing', `'${expression?.expression}' failed: ${error.message}`);
      else throw error;
      continue;
    }
    const list: ComputedOption[] = [];
    const seen = new Set<string>();
    for (const typed of results) {
      const converted = toAnswerValue(asItem as QuestionnaireItem, typed);
      if (typeof converted === 'string') {
        issues.push({
          severity: 'warning',
          code: 'value',
          diagnostics: `${label}: ${converted}; it is not offered`,
          expression: [at],
        });
        continue;
      }
      const [key, value] = converted;
      const display =
        key === 'valueReference' && isObject(typed.value) ? displayOf(typed.value as Json) : undefined;
      const option = {
        [key]: display && isObject(value) && value.display === undefined ? { ...value, display } : value,
      };
      const identity = JSON.stringify(key === 'valueReference' ? (value as Json).reference : option);
      if (seen.has(identity)) continue;
      seen.add(identity);
      list.push(option);
    }
    lists.set(item.linkId, list);
  }
  return { options: lists, unavailable, issues };
};

/**
 * The form as the editor shows it (docs/interface.md §3.3 "Computed answer lists"): a copy of
 * `questionnaire` whose answerExpression items carry the options computed when the page was
 * rendered as their answerOption, so the editor's choices and its checks (on the server and in
 * the browser's engine) are that list. Items whose list could not be computed are left as they are.
 */
export const withComputedOptions = (
  questionnaire: Questionnaire,
  options: ReadonlyMap<string, readonly ComputedOption[]>,
): Questionnaire => {
  if (options.size === 0) return questionnaire;
  const copy = (items: unknown): unknown =>
    arrayOf<QuestionnaireItem>(items).map((item) => {
      if (!isObject(item)) return item;
      const computed = hasAnswerExpression(item) ? options.get(item.linkId) : undefined;
      return {
        ...item,
        ...(computed && arrayOf(item.answerOption).length === 0 && item.answerValueSet === undefined
          ? { answerOption: computed.map((o) => structuredClone(o)) }
          : {}),
        ...(item.item !== undefined ? { item: copy(item.item) } : {}),
      };
    });
  return { ...questionnaire, item: copy(questionnaire.item) as Questionnaire['item'] };
};

/** Is `answer` (`{ value[x]: … }`) one of `options` (compared as answerOption is: codings by system and code, references by reference)? */
export const isComputedOption = (
  options: readonly ComputedOption[],
  answer: Record<string, unknown>,
): boolean => {
  const key = valueKeys(answer, 'value')[0];
  if (key === undefined) return false;
  return options.some((option) => {
    const own = valueKeys(option, 'value')[0];
    return own !== undefined && compareValues(key, answer[key], own, option[own]) === 0;
  });
};

/** How a computed option reads in a message: its display, else its value. */
export const optionText = (option: ComputedOption): string => {
  const key = valueKeys(option, 'value')[0];
  if (key === undefined) return '?';
  const value = option[key];
  if (isObject(value) && typeof value.display === 'string') return value.display;
  return describeValue(key, value);
};
