/**
 * `POST /Questionnaire/$assemble` and `POST|GET /Questionnaire/{id}/$assemble` on the form backend
 * (issue 35; docs/interface.md §4.4; SDC OperationDefinition Questionnaire-assemble): the input
 * `questionnaire` is a Questionnaire resource, a canonical (`valueCanonical`/`valueUri`, resolved
 * among the tenant's Questionnaires) or a `valueReference`; the answer is Parameters with `return`
 * (the assembled Questionnaire) and, when there are warnings, `outcome`. Assembly itself is
 * src/sdc/assemble.ts; {@link assembledForUse} is how $populate, $validate and the editor take a
 * form that needs assembling.
 */
import type { Context } from 'koa';
import type { Casebook } from '../../casebook.js';
import { DomainError } from '../../domain/decider.js';
import type { Principal } from '../../fhir/access.js';
import { referenceId } from '../../fhir/references.js';
import { idOf } from '../../fhir/resources.js';
import { readVisible } from '../../queries/visibility.js';
import { AssemblyFailed, assembleQuestionnaire, needsAssembly } from '../../sdc/assemble.js';
import type { EvaluationBudget } from '../../sdc/budget.js';
import type { CanonicalResolver, Questionnaire } from '../../sdc/types.js';
import { evaluationBudget } from '../edge/budget.js';
import { FHIR_JSON, requireFhirJson } from '../fhir/media.js';
import { sendOutcome } from '../fhir/outcome.js';
import { resolvePrincipal } from '../fhir/principal.js';
import { tenantResolver } from './resolve.js';
import type { RegisterOperation } from './router.js';

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The form as $populate, $validate and the editor use it: assembled first when it needs assembly
 * (src/sdc/assemble.ts `needsAssembly`), keeping the modular form's `version`, so a response names
 * the stored form and is checked against the same assembly later. Otherwise the form itself.
 * @throws {DomainError} 422 naming the display item when it cannot be assembled.
 */
export const assembledForUse = async (
  questionnaire: Questionnaire,
  resolve: CanonicalResolver,
  budget?: EvaluationBudget,
): Promise<Questionnaire> => {
  if (!needsAssembly(questionnaire)) return questionnaire;
  try {
    const { questionnaire: assembled } = await assembleQuestionnaire(
      questionnaire,
      resolve,
      budget ? { budget } : {},
    );
    const { version: _assembled, ...rest } = assembled;
    return {
      ...rest,
      ...(questionnaire.id !== undefined ? { id: questionnaire.id } : {}),
      ...(typeof questionnaire.version === 'string' ? { version: questionnaire.version } : {}),
    };
  } catch (error) {
    if (!(error instanceof AssemblyFailed)) throw error;
    throw new DomainError(
      'unprocessable',
      'AssemblyFailed',
      `the form needs assembling (SDC modular forms) and could not be assembled: ${error.message}`,
      error.issues[0]?.expression?.[0],
      { issueCode: error.issues[0]?.code ?? 'processing' },
    );
  }
};

const invalid = (message: string, expression?: string): DomainError =>
  new DomainError('invalid', 'InvalidAssembleParameters', message, expression);

/** The Questionnaire a request names. @throws {DomainError} 400 bad parameters, 404 unknown or unreadable. */
const questionnaireOf = async (
  ctx: Context,
  casebook: Casebook,
  principal: Principal,
  resolve: CanonicalResolver,
  storedId: string | undefined,
): Promise<Questionnaire> => {
  const read = async (id: number, expression?: string): Promise<Questionnaire> => {
    const row = await readVisible(casebook.sql, principal, 'Questionnaire', id);
    if (!row || row.deleted)
      throw new DomainError('not_found', 'ResourceNotFound', `Questionnaire/${id} is not known`, expression, {
        issueCode: 'not-found',
      });
    return { ...(row.resource as Questionnaire), id: String(id) };
  };
  if (storedId !== undefined) return read(idOf('Questionnaire', storedId));
  const body: unknown = ctx.request.body;
  if (!isObject(body) || body.resourceType !== 'Parameters')
    throw invalid('the body must be a Parameters resource with a questionnaire parameter', 'Parameters');
  const parameters = Array.isArray(body.parameter) ? body.parameter : [];
  const index = parameters.findIndex((p) => isObject(p) && p.name === 'questionnaire');
  if (index < 0)
    throw new DomainError(
      'invalid',
      'QuestionnaireRequired',
      'name the Questionnaire: a questionnaire parameter (resource, valueCanonical/valueUri or valueReference)',
      'Parameters.parameter',
      { issueCode: 'required' },
    );
  const at = `Parameters.parameter[${index}]`;
  const part = parameters[index] as Record<string, unknown>;
  if (isObject(part.resource)) {
    if (part.resource.resourceType !== 'Questionnaire')
      throw invalid(`${at}.resource must be a Questionnaire`, `${at}.resource`);
    return part.resource as Questionnaire;
  }
  const canonical = part.valueCanonical ?? part.valueUri ?? part.valueUrl;
  if (typeof canonical === 'string') {
    const found = await resolve('Questionnaire', canonical);
    if (!found)
      throw new DomainError(
        'not_found',
        'ResourceNotFound',
        `no Questionnaire with canonical ${canonical} is available`,
        at,
        {
          issueCode: 'not-found',
        },
      );
    return found as Questionnaire;
  }
  if (isObject(part.valueReference)) {
    const id = referenceId(part.valueReference, 'Questionnaire');
    if (id === undefined)
      throw invalid(`${at}.valueReference must be Questionnaire/{id}`, `${at}.valueReference`);
    return read(id, at);
  }
  throw invalid(
    `${at} must carry a Questionnaire resource, a valueCanonical/valueUri or a valueReference`,
    at,
  );
};

/** Handles one $assemble request: 200 Parameters (return, outcome), or 422 with every assembly error. */
const handle = async (ctx: Context, casebook: Casebook, storedId?: string): Promise<void> => {
  if (ctx.method === 'POST' && storedId === undefined) requireFhirJson(ctx);
  const principal = await resolvePrincipal(ctx, casebook);
  const resolve = tenantResolver(casebook, principal);
  const questionnaire = await questionnaireOf(ctx, casebook, principal, resolve, storedId);
  try {
    const { questionnaire: assembled, issues } = await assembleQuestionnaire(questionnaire, resolve, {
      budget: evaluationBudget(ctx),
    });
    ctx.status = 200;
    ctx.type = FHIR_JSON;
    ctx.body = {
      resourceType: 'Parameters',
      parameter: [
        { name: 'return', resource: assembled },
        ...(issues.length > 0
          ? [{ name: 'outcome', resource: { resourceType: 'OperationOutcome', issue: issues } }]
          : []),
      ],
    };
  } catch (error) {
    if (!(error instanceof AssemblyFailed)) throw error;
    sendOutcome(ctx, 422, error.issues);
  }
};

/** Registers `$assemble` (type and instance level) on the form-backend router. */
export const register: RegisterOperation = (router, casebook) => {
  router.post('/Questionnaire/$assemble', (ctx) => handle(ctx, casebook));
  router.post('/Questionnaire/:id/$assemble', (ctx) => handle(ctx, casebook, ctx.params.id));
  router.get('/Questionnaire/:id/$assemble', (ctx) => handle(ctx, casebook, ctx.params.id));
};
