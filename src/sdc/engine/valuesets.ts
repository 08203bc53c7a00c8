/**
 * The codes of the ValueSets a form's items take their answers from (answerValueSet), for the
 * form engine's membership check and the editor's choice lists. Pure apart from the resolver the
 * caller passes.
 */
import type { CanonicalResolver, Json, Questionnaire } from '../types.js';
import { arrayOf, EXT_UNIT_VALUE_SET, extensionValue, isObject } from './extensions.js';

/** The codes a ValueSet lists. */
export interface ValueSetMembers {
  readonly codes: readonly {
    readonly system: string | undefined;
    readonly code: string;
    /** The display the ValueSet gives the code, when it gives one. */
    readonly display?: string;
  }[];
  /** true when the ValueSet also includes codes it does not list (whole systems, filters, other ValueSets). */
  readonly open: boolean;
}

/** Every code a ValueSet lists, and whether it may hold more (compose without concept lists). */
export const membersOf = (valueSet: Json): ValueSetMembers => {
  const codes: { system: string | undefined; code: string; display?: string }[] = [];
  let open = false;
  const walk = (contains: unknown): void => {
    for (const c of arrayOf<unknown>(contains)) {
      if (!isObject(c)) continue;
      if (typeof c.code === 'string')
        codes.push({
          system: typeof c.system === 'string' ? c.system : undefined,
          code: c.code,
          ...(typeof c.display === 'string' ? { display: c.display } : {}),
        });
      walk(c.contains);
    }
  };
  const expansion = valueSet.expansion;
  if (isObject(expansion) && Array.isArray(expansion.contains)) walk(expansion.contains);
  else {
    const compose = isObject(valueSet.compose) ? valueSet.compose : {};
    for (const include of arrayOf<unknown>(compose.include)) {
      if (!isObject(include)) continue;
      const system = typeof include.system === 'string' ? include.system : undefined;
      if (Array.isArray(include.concept))
        for (const c of include.concept)
          if (isObject(c) && typeof c.code === 'string')
            codes.push({
              system,
              code: c.code,
              ...(typeof c.display === 'string' ? { display: c.display } : {}),
            });
      if (!Array.isArray(include.concept) || include.filter !== undefined || include.valueSet !== undefined)
        open = true;
    }
    const excluded = arrayOf<unknown>(compose.exclude).flatMap((exclude) =>
      isObject(exclude) && Array.isArray(exclude.concept)
        ? exclude.concept.map((c) => `${String(exclude.system)}|${isObject(c) ? String(c.code) : ''}`)
        : [],
    );
    if (excluded.length)
      return { codes: codes.filter((c) => !excluded.includes(`${c.system}|${c.code}`)), open };
  }
  return { codes, open };
};

/** The answerValueSet canonicals of a Questionnaire's items, in document order, once each. */
export const answerValueSetsOf = (questionnaire: Questionnaire): string[] => {
  const canonicals = new Set<string>();
  const walk = (items: unknown) => {
    for (const q of arrayOf<unknown>(items)) {
      if (!isObject(q)) continue;
      if (typeof q.answerValueSet === 'string') canonicals.add(q.answerValueSet);
      walk(q.item);
    }
  };
  walk(questionnaire.item);
  return [...canonicals];
};

/** The questionnaire-unitValueSet canonicals of a Questionnaire's items, once each (issue 35). */
export const unitValueSetsOf = (questionnaire: Questionnaire): string[] => {
  const canonicals = new Set<string>();
  const walk = (items: unknown) => {
    for (const q of arrayOf<unknown>(items)) {
      if (!isObject(q)) continue;
      const canonical = extensionValue(q, EXT_UNIT_VALUE_SET)?.[1];
      if (typeof canonical === 'string') canonicals.add(canonical);
      walk(q.item);
    }
  };
  walk(questionnaire.item);
  return [...canonicals];
};

/** A ValueSet contained in the Questionnaire (`#id`). */
export const containedValueSet = (questionnaire: Questionnaire, reference: string): Json | undefined =>
  arrayOf<Json>(questionnaire.contained).find(
    (c) => isObject(c) && c.resourceType === 'ValueSet' && `#${String(c.id)}` === reference,
  );

/**
 * Resolves every answerValueSet and unitValueSet of the Questionnaire: contained (`#id`) or through `resolve`
 * (a resolver that fails or finds nothing leaves the canonical out).
 * @returns canonical → ValueSet.
 */
export const resolveAnswerValueSets = async (
  questionnaire: Questionnaire,
  resolve: CanonicalResolver | undefined,
): Promise<Map<string, Json>> => {
  const resolved = new Map<string, Json>();
  for (const canonical of new Set([...answerValueSetsOf(questionnaire), ...unitValueSetsOf(questionnaire)])) {
    let valueSet: Json | undefined;
    if (canonical.startsWith('#')) valueSet = containedValueSet(questionnaire, canonical);
    else
      try {
        valueSet = await resolve?.('ValueSet', canonical);
      } catch {
        // An unreachable terminology source: membership goes unchecked, with a warning.
        valueSet = undefined;
      }
    if (isObject(valueSet) && valueSet.resourceType === 'ValueSet') resolved.set(canonical, valueSet);
  }
  return resolved;
};
