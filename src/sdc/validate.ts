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
 * maxDecimalPlaces, units, questionnaire-constraint). $validate does not calculate: it checks the
 * response it is given.
 */
import type { EvaluationBudget } from './budget.js';
import { questionnaireProblems } from './engine/definition-rules.js';
import { defineForm, runForm } from './engine/index.js';
import { membersOf, resolveAnswerValueSets } from './engine/valuesets.js';
import type {
  CanonicalResolver,
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
  const run = runForm(defineForm(questionnaire), qr, {
    valueSets,
    ...(options.budget ? { budget: options.budget } : {}),
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

const questionnaireName = (q: Questionnaire): string =>
  typeof q.url === 'string'
    ? `${q.url}${typeof q.version === 'string' ? `|${q.version}` : ''}`
    : typeof q.id === 'string'
      ? `Questionnaire/${q.id}`
      : typeof q.title === 'string'
        ? JSON.stringify(q.title)
        : '(inline)';
