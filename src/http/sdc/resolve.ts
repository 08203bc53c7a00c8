/**
 * Canonical resolution for the form backend (issue 4): Questionnaires and ValueSets of the
 * caller's tenant that the caller may read, by `url` or `url|version` (the newest version when
 * none is given).
 */
import type { Casebook } from '../../casebook.js';
import type { Principal } from '../../fhir/access.js';
import { findFormValueSets, findVisible } from '../../queries/visibility.js';
import { answerValueSetsOf, unitValueSetsOf } from '../../sdc/engine/valuesets.js';
import type { CanonicalResolver, Json, Questionnaire } from '../../sdc/types.js';

/** Splits `url|version`. */
export const splitCanonical = (canonical: string): { url: string; version: string | undefined } => {
  const bar = canonical.indexOf('|');
  return bar < 0
    ? { url: canonical, version: undefined }
    : { url: canonical.slice(0, bar), version: canonical.slice(bar + 1) };
};

/** The `url` (and `version`) query of a canonical. */
const canonicalQuery = (canonical: string) => {
  const { url, version } = splitCanonical(canonical);
  return {
    elements: [
      { element: 'url', values: [url] },
      ...(version ? [{ element: 'version', values: [version] }] : []),
    ],
    limit: 100,
  };
};

/** The row with the highest `version` (numeric-aware), or undefined. */
const newestVersion = <T extends { resource: Record<string, unknown> }>(rows: T[]): T | undefined =>
  rows.sort((a, b) =>
    String(b.resource.version ?? '').localeCompare(String(a.resource.version ?? ''), undefined, {
      numeric: true,
    }),
  )[0];

/** A resolver over the tenant's read model, honouring the principal's read scopes. */
export const tenantResolver =
  (casebook: Casebook, principal: Principal): CanonicalResolver =>
  async (resourceType, canonical) =>
    newestVersion(await findVisible(casebook.sql, principal, resourceType, canonicalQuery(canonical)))
      ?.resource as Json | undefined;

/**
 * The ValueSets a form names, read with the form's rights (issue 32): a session that may open the
 * Questionnaire may see its answer lists, whatever its own scopes say about ValueSets (a clinician
 * session with `user/` scopes cannot read the tenant's ValueSets, yet the choice list must show).
 * Only the canonicals the Questionnaire's items name as `answerValueSet` (or, for their units,
 * `questionnaire-unitValueSet`) resolve, in the caller's
 * tenant (src/queries/visibility.ts findFormValueSets); anything else resolves to nothing.
 */
export const formResolver =
  (casebook: Casebook, principal: Principal, questionnaire: Questionnaire): CanonicalResolver =>
  async (resourceType, canonical) => {
    if (
      resourceType !== 'ValueSet' ||
      ![...answerValueSetsOf(questionnaire), ...unitValueSetsOf(questionnaire)].includes(canonical)
    )
      return undefined;
    return newestVersion(await findFormValueSets(casebook.sql, principal, canonicalQuery(canonical)))
      ?.resource as Json | undefined;
  };
