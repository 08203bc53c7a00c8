/**
 * The report editor's form through the form engine (issue 32), pure: the server runs it on every
 * save and submit, the editor's Web Worker (src/http/app/browser/engine-worker.ts) on every change
 * of the page, with the same fields — so enablement, calculated values and the checks the page
 * shows are the ones the server stores and enforces.
 */
import type { EvaluationBudget } from '../../sdc/budget.js';
import type { EngineProblem } from '../../sdc/engine/context.js';
import { type FormDefinition, type FormRun, runForm } from '../../sdc/engine/index.js';
import type { ValueSetMembers } from '../../sdc/engine/valuesets.js';
import type { Questionnaire, QuestionnaireResponse } from '../../sdc/types.js';
import { buildItems, type Choice, type FormBody, shownAnswer } from './form-data.js';

/** What the page (and the worker) knows of the form: embedded as JSON in `#cb-data`. */
export interface EditorData {
  readonly questionnaire: Questionnaire;
  /** linkId → choices (answerOption, the answerValueSet's expansion, stored codings). */
  readonly choices: readonly (readonly [string, readonly Choice[]])[];
  /** answerValueSet canonical → its codes, for the membership check. */
  readonly valueSets: readonly (readonly [string, ValueSetMembers])[];
  /** The stored response's items (answers of items without fields are kept from them). */
  readonly stored: QuestionnaireResponse['item'];
  /** URL of the engine's Web Worker bundle (absent: the page runs without live checks). */
  readonly worker?: string;
}

/** Options of {@link evaluateEditorForm}. */
export interface EditorFormOptions {
  readonly choices: ReadonlyMap<string, readonly Choice[]>;
  /** Members of the answerValueSets, for the checks. */
  readonly valueSets: ReadonlyMap<string, ValueSetMembers>;
  /** The stored response (answers of items without fields are kept from it, and its other elements). */
  readonly stored: QuestionnaireResponse;
  /** The status the response is saved with; `completed` runs the checks that can refuse it. */
  readonly status: string;
  /** Run the answer checks (submit on the server; always in the browser). */
  readonly check: boolean;
  readonly budget?: EvaluationBudget;
  readonly now?: Date;
}

/** The form through the engine. */
export interface EditorForm {
  readonly run: FormRun;
  /** The whole form as a response: every field's item, answered or not (what the page shows). */
  readonly page: QuestionnaireResponse;
  /** Field messages by node key: values the fields cannot hold, then the checks' errors. */
  readonly errors: Map<string, string[]>;
  /** The checks' problems that are errors (not the form's own advisories), in the order found. */
  readonly refusals: readonly EngineProblem[];
}

/**
 * Maps the posted fields to a response (src/http/app/form-data.ts), completes it with every field,
 * decides enablement, calculates and (with `check`) checks it.
 */
export const evaluateEditorForm = (
  form: FormDefinition,
  body: FormBody,
  options: EditorFormOptions,
): EditorForm => {
  const built = buildItems(form.questionnaire.item, body, {
    choices: options.choices,
    existing: options.stored.item ?? [],
  });
  const { item: _item, ...rest } = options.stored;
  const page: QuestionnaireResponse = { ...rest, status: options.status, item: built.items };
  const run = runForm(form, page, {
    complete: true,
    calculate: true,
    ...(options.check ? { valueSets: options.valueSets } : {}),
    ...(options.budget ? { budget: options.budget } : {}),
    ...(options.now ? { now: options.now } : {}),
  });
  const errors = new Map(built.errors);
  const refusals = run.problems.filter((p) => !p.advisory);
  for (const problem of refusals) {
    // A value the field could not hold is the field's message; "required" after it would only repeat it.
    if (problem.key === undefined || built.errors.has(problem.key)) continue;
    errors.set(problem.key, [...(errors.get(problem.key) ?? []), problem.message]);
  }
  return { run, page, errors, refusals };
};

/** The calculated values of a run by node key, as the page shows them (units included). */
export const calculatedByKey = (
  run: FormRun,
  choices: ReadonlyMap<string, readonly Choice[]>,
): Map<string, string> => {
  const values = new Map<string, string>();
  for (const node of run.context.tree.nodes)
    if (node.def.calculatedExpression !== undefined)
      values.set(
        node.key,
        node.answers
          .map((a) => shownAnswer(node.def.item, a, choices.get(node.def.linkId)))
          .filter(Boolean)
          .join(', '),
      );
  return values;
};
