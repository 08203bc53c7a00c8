/**
 * The form engine in a Web Worker (issue 32): the editor page sends its fields, the worker maps
 * them and runs the engine (src/http/app/editor-form.ts, the server's code) and answers with
 * enablement, calculated values and field problems. FHIRPath runs here, off the page's thread,
 * under the page's watchdog (src/sdc/run-within-budget.browser.ts).
 */
import { EvaluationBudget } from '../../../sdc/budget.js';
import { defineForm, type FormDefinition } from '../../../sdc/engine/index.js';
import type { ValueSetMembers } from '../../../sdc/engine/valuesets.js';
import { observeEvaluations, refuseEvaluations } from '../../../sdc/run-within-budget.browser.js';
import { calculatedByKey, type EditorData, evaluateEditorForm } from '../editor-form.js';
import type { Choice, FormBody } from '../form-data.js';
import type { EngineResult, FieldProblem, FromWorker, ToWorker } from './protocol.js';

/** The worker's global scope, as far as this file uses it (the DOM library types a window). */
declare const self: {
  postMessage(message: FromWorker): void;
  onmessage: ((event: { data: ToWorker }) => void) | null;
};

interface State {
  readonly data: EditorData;
  readonly form: FormDefinition;
  readonly choices: ReadonlyMap<string, readonly Choice[]>;
  readonly valueSets: ReadonlyMap<string, ValueSetMembers>;
}

let state: State | undefined;

/** The fields as koa-body would parse the posted form: repeated names become arrays. */
const bodyOf = (fields: readonly (readonly [string, string])[]): FormBody => {
  const body: Record<string, string[]> = {};
  for (const [name, value] of fields) {
    if (!Object.hasOwn(body, name)) body[name] = [];
    body[name]!.push(value);
  }
  return body;
};

const run = (current: State, fields: readonly (readonly [string, string])[]): EngineResult => {
  const evaluated = evaluateEditorForm(current.form, bodyOf(fields), {
    choices: current.choices,
    valueSets: current.valueSets,
    stored: {
      resourceType: 'QuestionnaireResponse',
      status: 'in-progress',
      ...(current.data.stored ? { item: current.data.stored } : {}),
    },
    status: 'in-progress',
    check: true,
    // Each run is one "request": the same budget as a save on the server.
    budget: new EvaluationBudget(),
  });
  const problems: FieldProblem[] = [];
  for (const [key, messages] of evaluated.errors) {
    const codes = evaluated.refusals.filter((p) => p.key === key);
    for (const message of messages)
      problems.push([key, codes.find((p) => p.message === message)?.code ?? 'value', message]);
  }
  return {
    enabled: [...evaluated.run.enablementByKey()],
    calculated: [...calculatedByKey(evaluated.run, current.choices)],
    problems,
  };
};

self.onmessage = ({ data: message }) => {
  if (message.type === 'init') {
    refuseEvaluations(message.refused);
    observeEvaluations((label) => self.postMessage({ type: 'evaluating', label }));
    state = {
      data: message.data,
      form: defineForm(message.data.questionnaire),
      choices: new Map(message.data.choices),
      valueSets: new Map(message.data.valueSets),
    };
    return;
  }
  if (!state) return;
  try {
    self.postMessage({ type: 'result', seq: message.seq, ...run(state, message.fields) });
  } catch (error) {
    self.postMessage({
      type: 'failed',
      seq: message.seq,
      message: error instanceof Error ? error.message : String(error),
    });
  }
};
