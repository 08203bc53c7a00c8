/**
 * Canonical resolution for the form backend (issue 4): Questionnaires and ValueSets of the
 * caller's tenant that the caller may read, by `url` or `url|version` (the newest version when
 * none is given).
 */
import type { Casebook } from '../../casebook.js';
import type { Principal } from '../../fhir/access.js';
import { findVisible } from '../../queries/visibility.js';
import type { CanonicalResolver, Json } from '../../sdc/types.js';

/** Splits `url|version`. */
export const splitCanonical = (canonical: string): { url: string; version: string | undefined } => {
  const bar = canonical.indexOf('|');
  return bar < 0
    ? { url: canonical, version: undefined }
    : { url: canonical.slice(0, bar), version: canonical.slice(bar + 1) };
};

/** A resolver over the tenant's read model, honouring the principal's read scopes. */
export const tenantResolver =
  (casebook: Casebook, principal: Principal): CanonicalResolver =>
  async (resourceType, canonical) => {
    const { url, version } = splitCanonical(canonical);
    const rows = await findVisible(casebook.sql, principal, resourceType, {
      elements: [
        { element: 'url', values: [url] },
        ...(version ? [{ element: 'version', values: [version] }] : []),
      ],
      limit: 100,
    });
    const newest = rows.sort((a, b) =>
      String(b.resource.version ?? '').localeCompare(String(a.resource.version ?? ''), undefined, {
        numeric: true,
      }),
    )[0];
    return newest?.resource as Json | undefined;
  };
