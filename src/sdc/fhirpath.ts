/**
 * FHIRPath for the SDC operations (issue 4): one thin wrapper over HL7 fhirpath.js with the FHIR R5
 * model, shared by $populate, $validate and $extract so every expression is evaluated the same way:
 * same model, same error type, and a clock the caller controls (SDC expressions use `today()` and
 * `now()`; a deterministic operation passes its own `now`).
 */
import fhirpath from 'fhirpath';
import r5model from 'fhirpath/fhir-context/r5';

/** Environment variables of an evaluation, without the `%` (`{ patient: {...} }` → `%patient`). */
export type FhirPathEnv = Record<string, unknown>;

export interface FhirPathOptions {
  /**
   * The model path of `resource` when it is part of a resource, e.g. `QuestionnaireResponse.item`
   * for one response item (typing, and SDC's `weight()`, need it).
   */
  readonly base?: string;
  /** The instant `now()`, `today()` and `timeOfDay()` answer (UTC); the wall clock without it. */
  readonly now?: Date;
}

/** One result of an evaluation with its FHIRPath type. */
export interface TypedValue {
  /** `FHIR.date`, `FHIR.Coding`, `System.Integer`, `System.Quantity`… (empty when unknown). */
  readonly type: string;
  /** The value as plain JSON-like JavaScript (a System.Quantity renders as `5 'mg'`). */
  readonly value: unknown;
  /** fhirpath.js's internal node: pass it on as an environment variable to keep its type. */
  readonly raw: unknown;
}

/** An expression that does not parse or fails while evaluating (unknown function, undefined %variable…). */
export class FhirPathError extends Error {
  constructor(
    readonly expression: string,
    message: string,
  ) {
    super(message);
    this.name = 'FhirPathError';
  }
}

const clockFunctions = (now: Date) => {
  const iso = now.toISOString();
  const literal = (text: string) =>
    fhirpath.evaluate({}, text, {}, r5model, { resolveInternalTypes: false }) as unknown[];
  const today = literal(`@${iso.slice(0, 10)}`);
  const instant = literal(`@${iso}`);
  const time = literal(`@T${iso.slice(11, 23)}`);
  return {
    today: { fn: () => today },
    now: { fn: () => instant },
    timeOfDay: { fn: () => time },
  };
};

const run = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv,
  options: FhirPathOptions,
  resolveInternalTypes: boolean,
): unknown[] => {
  try {
    const path = options.base ? { base: options.base, expression } : expression;
    const result: unknown = fhirpath.evaluate(resource as object, path, env as never, r5model, {
      resolveInternalTypes,
      ...(options.now ? { userInvocationTable: clockFunctions(options.now) } : {}),
    } as never);
    if (result instanceof Promise)
      throw new FhirPathError(expression, 'asynchronous FHIRPath functions are not supported');
    return result as unknown[];
  } catch (error) {
    if (error instanceof FhirPathError) throw error;
    throw new FhirPathError(expression, error instanceof Error ? error.message : String(error));
  }
};

/**
 * Evaluates a FHIRPath expression against `resource` (a FHIR resource, or part of one with
 * `options.base`) using the FHIR R5 model; results are plain JavaScript values.
 * @throws {FhirPathError} when the expression does not parse or fails (e.g. an undefined %variable).
 */
export const evaluateFhirPath = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv = {},
  options: FhirPathOptions = {},
): unknown[] => run(resource, expression, env, options, true);

/**
 * Like {@link evaluateFhirPath}, with each result's FHIRPath type and its internal node (to bind it
 * as a variable of a later evaluation without losing its type, as fhirpath.js recommends).
 * @throws {FhirPathError} as evaluateFhirPath.
 */
export const evaluateFhirPathTyped = (
  resource: unknown,
  expression: string,
  env: FhirPathEnv = {},
  options: FhirPathOptions = {},
): TypedValue[] => {
  const raw = run(resource, expression, env, options, false).filter(
    // Metadata-only primitives (an `_birthDate` with no value) are not values.
    (node) => !(node && typeof node === 'object' && 'data' in node && node.data == null && '_data' in node),
  );
  const types = fhirpath.types(raw as never) as string[];
  const values = fhirpath.resolveInternalTypes(raw as never) as unknown[];
  return raw.map((node, i) => ({ type: types[i] ?? '', value: values[i], raw: node }));
};
