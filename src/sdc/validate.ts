/**
 * QuestionnaireResponse/$validate (issue 4; docs/interface.md §4.4 "Validate against its
 * Questionnaire (required fields, value types, constraints)"), on the form engine
 * (src/sdc/engine/): the editor runs the same rules, so a response the editor stores validates.
 * Pure apart from resolving answerValueSets.
 *
 * The response's item tree must mirror the Questionnaire's (engine/tree.ts); on top of that,
 * enablement (engine/enablement.ts: enableWhen, enableBehavior, SDC enableWhenExpression, repeats,
 * cycles) and the answer checks (engine/checks.ts: required, repeats, types and syntax,
 * answerOption/answerConstraint, answerValueSet, maxLength, minLength, regex, minValue, maxValue,
 * maxDecimalPlaces, units, questionnaire-constraint), with the answers an answerExpression permits
 * computed first (src/sdc/answer-expression.ts, issue 35). $validate does not calculate: it checks
 * the response it is given.
 */
import { computeAnswers, usesAnswerExpressions } from './answer-expression.js';
import type { EvaluationBudget } from './budget.js';
import { questionnaireProblems } from './engine/definition-rules.js';
import { EXT_ANSWER_EXPRESSION } from './engine/extensions.js';
import { defineForm, runForm } from './engine/index.js';
import { membersOf, resolveAnswerValueSets } from './engine/valuesets.js';
import type { QueryRun } from './fhir-query.js';
import type { FhirPathEnv } from './fhirpath.js';
import type {
  CanonicalResolver,
  Json,
  OperationOutcome,
  OperationOutcomeIssue,
  Questionnaire,
  QuestionnaireResponse,
} from './types.js';

export {
  EXT_ENABLE_WHEN_EXPRESSION,
  EXT_MAX_DECIMAL_PLACES,
  EXT_MAX_VALUE,
  EXT_MIN_LENGTH,
  EXT_MIN_VALUE,
  EXT_QUESTIONNAIRE_CONSTRAINT,
  EXT_REGEX,
} from './engine/extensions.js';
export { ANSWER_VALUE_KEYS } from './engine/values.js';

const RESPONSE_STATUSES = ['in-progress', 'completed', 'amended', 'entered-in-error', 'stopped'];

/** Options of {@link validateResponse}. */
export interface ValidateOptions {
  /** Resolves answerValueSet canonicals; without it (or when it finds nothing) membership is only warned about. */
  readonly resolve?: CanonicalResolver;
  /** The request's evaluation budget (src/sdc/budget.ts), shared by every expression and regex. */
  readonly budget?: EvaluationBudget;
  /**
   * Runs the x-fhir-query of answerExpressions (issue 35); without it such an item's answers are
   * not checked against its list, and the outcome says so.
   */
  readonly queries?: QueryRun;
  /** Launch contexts for answerExpressions; `%patient` defaults to the response's `Patient/{id}` subject. */
  readonly environment?: FhirPathEnv;
}

type Problem = Omit<OperationOutcomeIssue, 'severity'> & {
  readonly advisory?: boolean;
  /** A severity that holds whatever the response's status (the Questionnaire's own rules). */
  readonly fixed?: 'error' | 'warning';
};

/** Problems of the response's own elements: its status and the Questionnaire it names. */
const responseProblems = (qr: QuestionnaireResponse, questionnaire: Questionnaire): Problem[] => {
  const problems: Problem[] = [];
  const status = (qr as { status?: unknown }).status;
  if (typeof status !== 'string' || !RESPONSE_STATUSES.includes(status))
    problems.push({
      code: 'value',
      diagnostics: `status must be one of ${RESPONSE_STATUSES.join(', ')}, not ${JSON.stringify(status ?? null)}`,
      expression: ['QuestionnaireResponse.status'],
    });
  if (typeof qr.questionnaire === 'string' && typeof questionnaire.url === 'string') {
    const [url, version] = qr.questionnaire.split('|');
    if (url !== questionnaire.url || (version && questionnaire.version && version !== questionnaire.version))
      problems.push({
        code: 'business-rule',
        advisory: true,
        diagnostics: `the response names Questionnaire ${qr.questionnaire}, but is validated against ${questionnaire.url}${questionnaire.version ? `|${questionnaire.version}` : ''}`,
        expression: ['QuestionnaireResponse.questionnaire'],
      });
  }
  return problems;
};

/**
 * Validates a QuestionnaireResponse against its Questionnaire (docs/interface.md §4.4 $validate).
 * Never throws on malformed input: everything wrong becomes an issue.
 *
 * The Questionnaire's own rules come first (engine/definition-rules.ts: R5 que-1 … que-15 and the
 * item rules), its errors as errors whatever the status: a response is not valid against a form
 * that is not.
 *
 * Severity: `in-progress` and `stopped` responses are unfinished by definition, so every problem
 * is a warning; `completed`, `amended` (and anything else) get errors. Problems of the
 * Questionnaire or the environment (an unresolvable answerValueSet, a failing
 * enableWhenExpression or questionnaire-constraint expression, an invalid regex, a cycle of
 * conditions) are always warnings. A violated questionnaire-constraint follows its own
 * `severity`. Each issue has an `expression` (FHIRPath into the response, e.g.
 * `QuestionnaireResponse.item[1].item[0].answer[0]`) and `diagnostics` naming the question text
 * and linkId.
 *
 * @returns an OperationOutcome: the issues, or one `information` issue when the response is valid.
 */
export const validateResponse = async (
  response: QuestionnaireResponse,
  questionnaire: Questionnaire,
  options: ValidateOptions = {},
): Promise<OperationOutcome> => {
  // Our own copy: the engine keeps the items it places, and the caller's objects stay untouched.
  const qr = structuredClone(response) as QuestionnaireResponse;
  const status = (qr as { status?: unknown }).status;
  const lenient = status === 'in-progress' || status === 'stopped';
  const resolved = await resolveAnswerValueSets(questionnaire, options.resolve);
  const valueSets = new Map([...resolved].map(([canonical, valueSet]) => [canonical, membersOf(valueSet)]));
  // answerExpression (issue 35; SDC "Expressions"): the permitted answers, computed before the run.
  const computed = usesAnswerExpressions(questionnaire)
    ? await computeAnswers(questionnaire, EXT_ANSWER_EXPRESSION, {
        response: qr as Json,
        environment: { ...subjectContext(qr), ...options.environment },
        ...(options.queries ? { queries: options.queries } : {}),
        ...(options.budget ? { budget: options.budget } : {}),
      })
    : undefined;
  const run = runForm(defineForm(questionnaire), qr, {
    valueSets,
    ...(options.budget ? { budget: options.budget } : {}),
    ...(computed ? { computedOptions: computed.options, computedUnavailable: computed.unavailable } : {}),
  });
  const problems: Problem[] = [
    // The Questionnaire's own rules (issue 35): a form given inline is not checked by a write.
    ...questionnaireProblems(questionnaire).map((p) => ({
      code: p.severity === 'error' ? 'invariant' : 'business-rule',
      diagnostics: `the Questionnaire breaks ${p.diagnostics}`,
      expression: [p.expression],
      fixed: p.severity,
    })),
    ...responseProblems(qr, questionnaire),
    ...containedProblems(qr),
    ...(computed?.issues ?? []).map(({ severity: _severity, ...issue }) => ({ ...issue, advisory: true })),
    ...run.structure.map((p) => ({ code: p.code, diagnostics: p.diagnostics, expression: [p.expression] })),
    ...run.problems.map((p) => ({
      code: p.code,
      diagnostics: p.diagnostics,
      expression: [p.expression],
      ...(p.advisory ? { advisory: true } : {}),
    })),
  ];
  if (problems.length === 0)
    return {
      resourceType: 'OperationOutcome',
      issue: [
        {
          severity: 'information',
          code: 'informational',
          diagnostics: `the response is valid against Questionnaire ${questionnaireName(questionnaire)}`,
        },
      ],
    };
  return {
    resourceType: 'OperationOutcome',
    issue: problems.map(({ advisory, fixed, ...issue }) => ({
      severity: fixed ?? (advisory || lenient ? 'warning' : 'error'),
      ...issue,
    })),
  };
};

/**
 * The resources contained in a response (R5 Resource.contained; issue 35): the id each has and
 * the R5 rules on them — dom-2 (no nested `contained`), dom-3 (each is referenced from elsewhere
 * in the response: `#id` in an answer, `questionnaire`, or from another contained resource), dom-4
 * (no `meta.versionId`/`meta.lastUpdated`), and an `id` on each (a contained resource is found by
 * it). An answer's `valueReference` `#id` must name one of them.
 */
const containedProblems = (qr: QuestionnaireResponse): Problem[] => {
  const problems: Problem[] = [];
  const contained = Array.isArray(qr.contained) ? (qr.contained as unknown[]) : [];
  const ids = new Map<string, number>();
  contained.forEach((resource, index) => {
    const at = `QuestionnaireResponse.contained[${index}]`;
    const r = isObject(resource) ? resource : undefined;
    if (!r || typeof r.resourceType !== 'string') {
      problems.push({
        code: 'structure',
        diagnostics: 'a contained resource must be a resource with a resourceType',
        expression: [at],
      });
      return;
    }
    if (typeof r.id !== 'string' || r.id === '') {
      problems.push({
        code: 'required',
        diagnostics: `the contained ${r.resourceType} has no id, so nothing can refer to it`,
        expression: [at],
      });
      return;
    }
    if (ids.has(r.id))
      problems.push({
        code: 'structure',
        diagnostics: `two contained resources have the id ${JSON.stringify(r.id)}`,
        expression: [at],
      });
    ids.set(r.id, index);
    if (r.contained !== undefined)
      problems.push({
        code: 'invariant',
        diagnostics: `the contained ${r.resourceType}/${r.id} contains resources itself (R5 dom-2)`,
        expression: [`${at}.contained`],
      });
    const meta = isObject(r.meta) ? r.meta : {};
    if (meta.versionId !== undefined || meta.lastUpdated !== undefined)
      problems.push({
        code: 'invariant',
        diagnostics: `the contained ${r.resourceType}/${r.id} has meta.versionId or meta.lastUpdated (R5 dom-4)`,
        expression: [`${at}.meta`],
      });
  });
  // Every `#id` the response and its contained resources refer to: references, the response's
  // `questionnaire`, and canonicals (a contained Questionnaire's answerValueSet `#vs`).
  const referenced = new Set<string>();
  const REFERRING = /^(reference|questionnaire|answerValueSet|value(Canonical|Reference))$/;
  const visit = (value: unknown, key: string, depth: number): void => {
    if (depth > 10_000) return;
    if (typeof value === 'string') {
      if (value.startsWith('#') && REFERRING.test(key)) referenced.add(value.slice(1));
      return;
    }
    if (Array.isArray(value)) for (const v of value) visit(v, key, depth + 1);
    else if (isObject(value)) for (const [k, inner] of Object.entries(value)) visit(inner, k, depth + 1);
  };
  const { contained: _own, ...rest } = qr as Json;
  visit(rest, '', 0);
  for (const resource of contained) visit(resource, '', 0);
  for (const [id, index] of ids)
    if (!referenced.has(id))
      problems.push({
        code: 'invariant',
        advisory: true,
        diagnostics: `the contained ${String((contained[index] as Json).resourceType)}/${id} is not referenced from elsewhere in the response (R5 dom-3)`,
        expression: [`QuestionnaireResponse.contained[${index}]`],
      });
  // Answers naming a contained resource: it must be there.
  const answers = (items: unknown, path: string): void => {
    if (!Array.isArray(items)) return;
    items.forEach((item, i) => {
      if (!isObject(item)) return;
      const itemPath = `${path}.item[${i}]`;
      answers(item.item, itemPath);
      (Array.isArray(item.answer) ? item.answer : []).forEach((answer: unknown, k: number) => {
        if (!isObject(answer)) return;
        const reference = isObject(answer.valueReference) ? answer.valueReference.reference : undefined;
        if (typeof reference === 'string' && reference.startsWith('#') && !ids.has(reference.slice(1)))
          problems.push({
            code: 'not-found',
            diagnostics: `the answer refers to ${reference}, which the response does not contain`,
            expression: [`${itemPath}.answer[${k}].valueReference`],
          });
        answers(answer.item, `${itemPath}.answer[${k}]`);
      });
    });
  };
  answers(qr.item, 'QuestionnaireResponse');
  return problems;
};

/**
 * `%patient` for answerExpressions when the response's subject is a local `Patient/{id}`: the id is
 * what a query's `{{%patient.id}}` needs (the resource itself is not read).
 */
const subjectContext = (qr: QuestionnaireResponse): FhirPathEnv => {
  const reference = (qr.subject as { reference?: unknown } | undefined)?.reference;
  const match = typeof reference === 'string' ? /^Patient\/([A-Za-z0-9\-.]{1,64})$/.exec(reference) : null;
  return match ? { patient: { resourceType: 'Patient', id: match[1] } } : {};
};

const isObject = (value: unknown): value is Json =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

const questionnaireName = (q: Questionnaire): string =>
  typeof q.url === 'string'
    ? `${q.url}${typeof q.version === 'string' ? `|${q.version}` : ''}`
    : typeof q.id === 'string'
      ? `Questionnaire/${q.id}`
      : typeof q.title === 'string'
        ? JSON.stringify(q.title)
        : '(inline)';
