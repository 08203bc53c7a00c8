/**
 * SDC modular forms (issue 35; docs/interface.md §4.4 `$assemble`; SDC IG "Modular Forms" and
 * OperationDefinition Questionnaire-assemble): a Questionnaire whose display items carry
 * `sdc-questionnaire-subQuestionnaire` becomes the equivalent fully inline Questionnaire. Pure
 * apart from the resolver the caller passes (the caller's tenant, under its scopes).
 *
 * - A display item with subQuestionnaire (a canonical, `url|version`) is replaced by the root items
 *   of that Questionnaire, assembled in turn (nesting at most {@link MAX_DEPTH} deep; a
 *   Questionnaire that includes itself is an error).
 * - The sub-Questionnaire's `assembleContext` names must be defined where it is inserted: a
 *   `variable` of the display item, of an ancestor item or of the root, or a launchContext name.
 * - linkIdPrefix (the SDC example's convention): a `variable` named `linkIdPrefix` in scope of the
 *   display item is evaluated as FHIRPath (with the enclosing `%linkIdPrefix`), and its string is
 *   put before every linkId (and enableWhen.question) of the inserted items.
 * - The sub-Questionnaire's own extensions but assembleContext, assemble-expectation and
 *   launchContext move onto the display item's parent item (onto the root at top level), its
 *   launchContexts onto the root when the root lacks that name, its contained resources into the
 *   root (an id already used by another resource is an error).
 * - Items with a `definition` take what they lack from the ElementDefinition or library item it
 *   names (src/sdc/assemble-definitions.ts; SDC "Data Element-based Questionnaires").
 * - The result: `assemble-expectation` of an `assemble-*` code removed, one `assembledFrom` per
 *   sub-Questionnaire used (`url|version`), `version` suffixed `-assembled`, no `id` or `meta`
 *   (a new resource). Its Questionnaire rules (engine/definition-rules.ts) that fail are warnings
 *   (SDC: "if the resulting Questionnaire is not valid, return a warning").
 */
import { applyDefinitions } from './assemble-definitions.js';
import type { EvaluationBudget } from './budget.js';
import { questionnaireProblems } from './engine/definition-rules.js';
import {
  arrayOf,
  EXT_LAUNCH_CONTEXT,
  EXT_VARIABLE,
  expressionOf,
  extensionsOf,
  isObject,
} from './engine/extensions.js';
import { evaluateFhirPath, FhirPathError } from './fhirpath.js';
import type {
  CanonicalResolver,
  DefinitionResolver,
  Extension,
  Json,
  OperationOutcomeIssue,
  Questionnaire,
} from './types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
export const EXT_SUB_QUESTIONNAIRE = `${SDC}sdc-questionnaire-subQuestionnaire`;
export const EXT_ASSEMBLE_CONTEXT = `${SDC}sdc-questionnaire-assembleContext`;
export const EXT_ASSEMBLED_FROM = `${SDC}sdc-questionnaire-assembledFrom`;
export const EXT_ASSEMBLE_EXPECTATION = `${SDC}sdc-questionnaire-assemble-expectation`;
/** How deep sub-Questionnaires may nest. */
export const MAX_DEPTH = 10;

/** Why a Questionnaire could not be assembled: the issues, errors among them. */
export class AssemblyFailed extends Error {
  constructor(readonly issues: readonly OperationOutcomeIssue[]) {
    super(issues.map((i) => i.diagnostics).join('; '));
  }
}

/** The outcome of {@link assembleQuestionnaire}. */
export interface Assembled {
  readonly questionnaire: Questionnaire;
  /** Warnings about the result (its Questionnaire rules). */
  readonly issues: readonly OperationOutcomeIssue[];
}

/** Does the Questionnaire need assembling (a subQuestionnaire anywhere, or an `assemble-*` expectation)? */
export const needsAssembly = (questionnaire: Questionnaire): boolean => {
  const expectation = extensionsOf(questionnaire, EXT_ASSEMBLE_EXPECTATION)[0]?.ext.valueCode;
  if (typeof expectation === 'string' && expectation.startsWith('assemble-')) return true;
  const walk = (items: unknown): boolean =>
    arrayOf<unknown>(items).some(
      (item) => isObject(item) && (extensionsOf(item, EXT_SUB_QUESTIONNAIRE).length > 0 || walk(item.item)),
    );
  return walk(questionnaire.item);
};

interface Scope {
  /** Names defined here: variables and launchContext names. */
  readonly names: ReadonlySet<string>;
  /** The value of `%linkIdPrefix` here, when one is defined. */
  readonly prefix: string | undefined;
}

interface Run {
  readonly resolve: CanonicalResolver;
  readonly budget: EvaluationBudget | undefined;
  readonly root: Questionnaire;
  readonly errors: OperationOutcomeIssue[];
  readonly assembledFrom: string[];
  readonly contained: Json[];
  readonly launchContexts: Extension[];
}

const error = (run: Run, diagnostics: string, expression: string, code = 'processing'): void => {
  run.errors.push({ severity: 'error', code, diagnostics, expression: [expression] });
};

const launchContextName = (ext: Extension): string | undefined => {
  const name = arrayOf<Extension>(ext.extension).find((e) => isObject(e) && e.url === 'name');
  const value = name?.valueCoding ?? name?.valueId ?? name?.valueCode;
  return isObject(value) && typeof value.code === 'string'
    ? value.code
    : typeof value === 'string'
      ? value
      : undefined;
};

/** The variable names an element defines. */
const variableNames = (element: { extension?: unknown }): string[] =>
  extensionsOf(element, EXT_VARIABLE).flatMap(({ ext }) => {
    const name = expressionOf(ext)?.name;
    return typeof name === 'string' ? [name] : [];
  });

/** The scope inside `element`: its variables added, its linkIdPrefix evaluated. */
const enter = (run: Run, scope: Scope, element: { extension?: unknown }, path: string): Scope => {
  const names = new Set([...scope.names, ...variableNames(element)]);
  let prefix = scope.prefix;
  const definition = extensionsOf(element, EXT_VARIABLE)
    .map(({ ext }) => expressionOf(ext))
    .find((e) => e?.name === 'linkIdPrefix');
  if (definition && typeof definition.expression === 'string') {
    try {
      const result = evaluateFhirPath(
        {},
        definition.expression,
        { linkIdPrefix: scope.prefix ?? '' },
        run.budget ? { budget: run.budget } : {},
      );
      if (result.length === 1 && typeof result[0] === 'string') prefix = result[0];
      else error(run, `the linkIdPrefix variable of ${path} does not give one string`, path);
    } catch (failure) {
      error(
        run,
        `the linkIdPrefix variable of ${path} could not be evaluated: ${failure instanceof FhirPathError ? failure.message : String(failure)}`,
        path,
      );
    }
  }
  return { names, prefix };
};

const withPrefix = (item: Json, prefix: string | undefined): Json => {
  if (prefix === undefined || prefix === '') return item;
  return {
    ...item,
    ...(typeof item.linkId === 'string' ? { linkId: `${prefix}${item.linkId}` } : {}),
    ...(Array.isArray(item.enableWhen)
      ? {
          enableWhen: item.enableWhen.map((c) =>
            isObject(c) && typeof c.question === 'string' ? { ...c, question: `${prefix}${c.question}` } : c,
          ),
        }
      : {}),
  };
};

const SUB_LEVEL_ONLY = [EXT_ASSEMBLE_CONTEXT, EXT_ASSEMBLE_EXPECTATION, EXT_LAUNCH_CONTEXT];

/**
 * Assembles a list of items. `prefix` is put before the linkIds of these items (those of an
 * inserted sub-Questionnaire); `chain` holds the canonicals being assembled (cycle detection).
 * @returns the items and the extensions that move onto their parent.
 */
const assembleItems = async (
  run: Run,
  items: unknown,
  scope: Scope,
  prefix: string | undefined,
  path: string,
  chain: readonly string[],
): Promise<{ items: Json[]; parentExtensions: Extension[] }> => {
  const out: Json[] = [];
  const parentExtensions: Extension[] = [];
  for (const [index, raw] of arrayOf<unknown>(items).entries()) {
    const at = `${path}.item[${index}]`;
    if (!isObject(raw)) {
      out.push(raw as Json);
      continue;
    }
    const inner = enter(run, scope, raw, at);
    const sub = extensionsOf(raw, EXT_SUB_QUESTIONNAIRE)[0]?.ext.valueCanonical;
    if (raw.type === 'display' && typeof sub === 'string') {
      const inserted = await insert(run, sub, inner, at, chain);
      out.push(...inserted.items);
      parentExtensions.push(...inserted.parentExtensions);
      continue;
    }
    const children = await assembleItems(run, raw.item, inner, prefix, at, chain);
    const item = withPrefix({ ...raw }, prefix);
    if (raw.item !== undefined) item.item = children.items;
    if (children.parentExtensions.length > 0)
      item.extension = [...arrayOf<Extension>(raw.extension), ...children.parentExtensions];
    out.push(item);
  }
  return { items: out, parentExtensions };
};

/** Replaces the display item at `at` by the assembled root items of Questionnaire `canonical`. */
const insert = async (
  run: Run,
  canonical: string,
  scope: Scope,
  at: string,
  chain: readonly string[],
): Promise<{ items: Json[]; parentExtensions: Extension[] }> => {
  const none = { items: [], parentExtensions: [] };
  if (chain.length >= MAX_DEPTH) {
    error(run, `${at}: sub-Questionnaires nest more than ${MAX_DEPTH} deep`, at, 'too-costly');
    return none;
  }
  let found: Json | undefined;
  try {
    found = await run.resolve('Questionnaire', canonical);
  } catch {
    found = undefined;
  }
  if (!isObject(found) || found.resourceType !== 'Questionnaire') {
    error(
      run,
      `${at}: the subQuestionnaire ${canonical} is not known (or not readable with your scopes)`,
      at,
      'not-found',
    );
    return none;
  }
  const sub = found as Questionnaire;
  const key = typeof sub.url === 'string' ? `${sub.url}|${sub.version ?? ''}` : canonical;
  if (chain.includes(key)) {
    error(
      run,
      `${at}: the subQuestionnaire ${canonical} includes itself (${[...chain, key].join(' → ')})`,
      at,
    );
    return none;
  }
  for (const { ext } of extensionsOf(sub, EXT_ASSEMBLE_CONTEXT)) {
    const name = ext.valueString;
    if (typeof name === 'string' && !scope.names.has(name))
      error(
        run,
        `${at}: the subQuestionnaire ${canonical} needs ${JSON.stringify(name)} in context (assembleContext), which no variable or launchContext around the item defines`,
        at,
        'required',
      );
  }
  const used = typeof sub.url === 'string' ? `${sub.url}${sub.version ? `|${sub.version}` : ''}` : canonical;
  if (!run.assembledFrom.includes(used)) run.assembledFrom.push(used);
  for (const resource of arrayOf<Json>(sub.contained)) {
    const clash = run.contained.find((c) => isObject(c) && isObject(resource) && c.id === resource.id);
    if (!clash) run.contained.push(resource);
    else if (JSON.stringify(clash) !== JSON.stringify(resource))
      error(
        run,
        `${at}: the subQuestionnaire ${canonical} contains #${String(resource.id)}, an id the form already uses`,
        at,
      );
  }
  for (const { ext } of extensionsOf(sub, EXT_LAUNCH_CONTEXT)) {
    const name = launchContextName(ext);
    if (!run.launchContexts.some((l) => launchContextName(l) === name)) run.launchContexts.push(ext);
  }
  const subScope: Scope = {
    names: new Set([...scope.names, ...variableNames(sub)]),
    prefix: scope.prefix,
  };
  const assembled = await assembleItems(run, sub.item, subScope, scope.prefix, at, [...chain, key]);
  const moved = arrayOf<Extension>(sub.extension).filter(
    (e) => isObject(e) && !SUB_LEVEL_ONLY.includes(e.url) && !e.url.includes('versionAlgorithm'),
  );
  return { items: assembled.items, parentExtensions: [...moved, ...assembled.parentExtensions] };
};

/**
 * Assembles a modular Questionnaire (see the module comment). A Questionnaire without
 * subQuestionnaires comes back as it is but for the assembly metadata.
 * @param resolve finds sub-Questionnaires by canonical (`url` or `url|version`) in the caller's tenant.
 * @throws {AssemblyFailed} when a sub-Questionnaire cannot be found, includes itself, nests too
 *   deep, lacks its assembleContext, clashes on a contained id or its linkIdPrefix fails; the
 *   issues name the display item (`Questionnaire.item[0].item[0]`).
 */
export const assembleQuestionnaire = async (
  questionnaire: Questionnaire,
  resolve: CanonicalResolver,
  options: {
    readonly budget?: EvaluationBudget;
    /** Resolves items' `definition`s; without it, Questionnaires through `resolve` and no StructureDefinition. */
    readonly resolveDefinition?: DefinitionResolver;
  } = {},
): Promise<Assembled> => {
  const run: Run = {
    resolve,
    budget: options.budget,
    root: questionnaire,
    errors: [],
    assembledFrom: [],
    contained: [...arrayOf<Json>(questionnaire.contained)],
    launchContexts: extensionsOf(questionnaire, EXT_LAUNCH_CONTEXT).map(({ ext }) => ext),
  };
  const launchNames = run.launchContexts.flatMap((l) => launchContextName(l) ?? []);
  const rootScope = enter(
    run,
    { names: new Set(launchNames), prefix: undefined },
    questionnaire,
    'Questionnaire',
  );
  const self =
    typeof questionnaire.url === 'string' ? [`${questionnaire.url}|${questionnaire.version ?? ''}`] : [];
  const { items, parentExtensions } = await assembleItems(
    run,
    questionnaire.item,
    rootScope,
    undefined,
    'Questionnaire',
    self,
  );
  // Items carrying `definition` take what they lack from it (src/sdc/assemble-definitions.ts).
  const definitions = await applyDefinitions(
    items,
    options.resolveDefinition ??
      ((type, canonical) =>
        type === 'Questionnaire' ? resolve('Questionnaire', canonical) : Promise.resolve(undefined)),
  );
  run.errors.push(...definitions.errors);
  if (run.errors.length > 0) throw new AssemblyFailed(run.errors);
  const { id: _id, meta: _meta, ...rest } = questionnaire;
  const extension = [
    ...arrayOf<Extension>(questionnaire.extension).filter((e) => {
      if (!isObject(e) || e.url === EXT_LAUNCH_CONTEXT) return false;
      return !(
        e.url === EXT_ASSEMBLE_EXPECTATION &&
        typeof e.valueCode === 'string' &&
        e.valueCode.startsWith('assemble-')
      );
    }),
    ...run.launchContexts,
    ...run.assembledFrom.map((canonical) => ({ url: EXT_ASSEMBLED_FROM, valueCanonical: canonical })),
    ...parentExtensions,
  ];
  const assembled: Questionnaire = {
    ...rest,
    resourceType: 'Questionnaire',
    ...(typeof questionnaire.version === 'string' ? { version: `${questionnaire.version}-assembled` } : {}),
    ...(extension.length > 0 ? { extension } : {}),
    ...(run.contained.length > 0 ? { contained: run.contained } : {}),
    ...(questionnaire.item !== undefined ? { item: items as Questionnaire['item'] } : {}),
  };
  if (extension.length === 0) delete assembled.extension;
  const issues = [
    ...definitions.warnings,
    ...questionnaireProblems(assembled).map(
      (p): OperationOutcomeIssue => ({
        severity: 'warning',
        code: 'invariant',
        diagnostics: `the assembled Questionnaire breaks ${p.diagnostics}`,
        expression: [p.expression],
      }),
    ),
  ];
  return { questionnaire: assembled, issues };
};
