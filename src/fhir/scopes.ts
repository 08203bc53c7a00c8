/**
 * SMART on FHIR resource scopes: parsing (v1 and v2 syntax), v2 formatting, downscoping at
 * session creation and the lookup used by data-server enforcement (docs/interface.md §5.3, §2.1 `scope`).
 *
 * Pure: no I/O, no clock. Stored scopes are always v2 (docs/interface.md §2.3 `fhir_server.scope`).
 */

/** `patient/`, `user/` or `system/` (docs/interface.md §5.3 "Contexts"). */
export type ScopeContext = 'patient' | 'user' | 'system';

/** v2 permission letters: create, read, update, delete, search (docs/interface.md §5.3). */
export type Permission = 'c' | 'r' | 'u' | 'd' | 's';

/** One parsed resource scope, always in v2 form. */
export interface ResourceScope {
  context: ScopeContext;
  /** A FHIR resource type such as `Patient`, or `*`. */
  resourceType: string;
  /** Non-empty, canonical order c r u d s, no duplicates. */
  permissions: Permission[];
  /** The `?query` part in the given order, names and values URL-decoded (Questionnaire scopes only). */
  filters: [name: string, value: string][];
}

/** Thrown for a scope that is neither a valid resource scope nor a well-known SMART scope (docs/interface.md §5.3). */
export class ScopeSyntaxError extends Error {
  override readonly name = 'ScopeSyntaxError';
  constructor(
    /** The offending scope text, as given. */
    readonly scope: string,
    /** Why it was refused, without the scope text (for OperationOutcome diagnostics). */
    readonly reason: string,
  ) {
    super(`invalid scope '${scope}': ${reason}`);
  }
}

const CONTEXTS: readonly ScopeContext[] = ['patient', 'user', 'system'];

/** Canonical order; every permission list this module builds is filtered from it. */
const PERMISSIONS: readonly Permission[] = ['c', 'r', 'u', 'd', 's'];

/** docs/interface.md §5.3: `.read` = rs, `.write` = cud (write does not include read), `.*` = cruds. */
const V1_ACTIONS: Readonly<Record<string, readonly Permission[]>> = {
  read: ['r', 's'],
  write: ['c', 'u', 'd'],
  '*': PERMISSIONS,
};

/**
 * SMART scopes that carry no resource access. They are accepted in a session request but grant
 * nothing on the data server, so they are reported as ignored rather than refused.
 */
const NON_RESOURCE_SCOPES: ReadonlySet<string> = new Set([
  'openid',
  'fhirUser',
  'profile',
  'launch',
  'launch/patient',
  'launch/encounter',
  'offline_access',
  'online_access',
]);

const RESOURCE_TYPE = /^[A-Z][A-Za-z]+$/;

/** docs/interface.md §5.3 rule 3: the only filters a Questionnaire scope may carry. */
const QUESTIONNAIRE_FILTERS: ReadonlySet<string> = new Set([
  'project',
  'url',
  'identifier',
  'version',
  'specialty',
]);

/** docs/interface.md §5.3 rule 2: context resources an EHR-managed tenant exposes read-by-id only. */
const EHR_CONTEXT_TYPES: readonly string[] = ['Patient', 'Encounter', 'Practitioner', 'DocumentReference'];

const isContext = (text: string): text is ScopeContext => (CONTEXTS as readonly string[]).includes(text);

const intersect = (a: readonly Permission[], b: readonly Permission[]): Permission[] =>
  PERMISSIONS.filter((p) => a.includes(p) && b.includes(p));

const unite = (a: readonly Permission[], b: readonly Permission[]): Permission[] =>
  PERMISSIONS.filter((p) => a.includes(p) || b.includes(p));

const parseAction = (scope: string, action: string): Permission[] => {
  const v1 = V1_ACTIONS[action];
  if (v1 !== undefined) return [...v1];
  if (action === '') throw new ScopeSyntaxError(scope, 'missing action after the dot');
  const seen = new Set<Permission>();
  for (const letter of action) {
    if (!(PERMISSIONS as readonly string[]).includes(letter)) {
      throw new ScopeSyntaxError(
        scope,
        `invalid action '${action}' (expected read, write, * or a set of the letters c, r, u, d, s)`,
      );
    }
    if (seen.has(letter as Permission)) {
      throw new ScopeSyntaxError(
        scope,
        `permission '${letter}' appears more than once in action '${action}'`,
      );
    }
    seen.add(letter as Permission);
  }
  return PERMISSIONS.filter((p) => seen.has(p));
};

const decode = (scope: string, text: string): string => {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new ScopeSyntaxError(scope, `malformed percent-encoding in '${text}'`);
  }
};

const parseFilters = (scope: string, resourceType: string, query: string): [string, string][] => {
  if (resourceType !== 'Questionnaire') {
    throw new ScopeSyntaxError(scope, 'filters are only supported on Questionnaire scopes');
  }
  if (query === '') throw new ScopeSyntaxError(scope, "empty filter list after '?'");
  return query.split('&').map((pair): [string, string] => {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new ScopeSyntaxError(scope, `filter '${pair}' is not of the form name=value`);
    const name = decode(scope, pair.slice(0, eq));
    const value = decode(scope, pair.slice(eq + 1));
    if (!QUESTIONNAIRE_FILTERS.has(name)) {
      throw new ScopeSyntaxError(
        scope,
        `unknown Questionnaire filter '${name}' (expected project, url, identifier, version or specialty)`,
      );
    }
    if (value === '') throw new ScopeSyntaxError(scope, `filter '${name}' has an empty value`);
    if (name === 'url' && value.includes('|')) {
      throw new ScopeSyntaxError(scope, "the url filter takes a canonical URL without '|version'");
    }
    return [name, value];
  });
};

/**
 * Parses one scope token (docs/interface.md §5.3): `<context>/<resourceType|*>.<action>[?query]`.
 *
 * v1 actions are converted to v2 (`read` → rs, `write` → cud, `*` → cruds); v2 letters may come
 * in any order and are returned in canonical order c r u d s. Query values are URL-decoded with
 * `decodeURIComponent` (a `+` stays a plus sign).
 *
 * @returns the resource scope, or `null` for a well-known non-resource SMART scope (`openid`,
 *   `fhirUser`, `profile`, `launch`, `launch/patient`, `launch/encounter`, `offline_access`,
 *   `online_access`; case-sensitive, as OAuth scope tokens are).
 * @throws ScopeSyntaxError for anything else: unknown context, bad resource type or action,
 *   a repeated permission letter, a query part on a non-Questionnaire scope, an unknown
 *   Questionnaire filter, an empty filter value, or a `url` filter carrying `|version`.
 */
export function parseScope(text: string): ResourceScope | null {
  if (NON_RESOURCE_SCOPES.has(text)) return null;
  const slash = text.indexOf('/');
  if (slash < 0) {
    throw new ScopeSyntaxError(
      text,
      'neither a resource scope (<context>/<type>.<action>) nor a known SMART scope',
    );
  }
  const context = text.slice(0, slash);
  if (!isContext(context)) {
    throw new ScopeSyntaxError(text, `unknown context '${context}' (expected patient, user or system)`);
  }
  const rest = text.slice(slash + 1);
  const question = rest.indexOf('?');
  const path = question < 0 ? rest : rest.slice(0, question);
  const dot = path.indexOf('.');
  if (dot < 0) throw new ScopeSyntaxError(text, "missing '.<action>' after the resource type");
  const resourceType = path.slice(0, dot);
  if (resourceType !== '*' && !RESOURCE_TYPE.test(resourceType)) {
    throw new ScopeSyntaxError(text, `invalid resource type '${resourceType}' (expected e.g. Patient, or *)`);
  }
  const permissions = parseAction(text, path.slice(dot + 1));
  const filters = question < 0 ? [] : parseFilters(text, resourceType, rest.slice(question + 1));
  return { context, resourceType, permissions, filters };
}

/**
 * Parses the session request's `scope` field (docs/interface.md §2.1, §5.3): a space-separated string (any
 * whitespace; empty tokens dropped) or an array of strings, each of which may itself hold several
 * space-separated scopes. `undefined` yields no scopes.
 *
 * @returns `scopes`: the resource scopes in the given order (duplicates kept; `downscope` merges
 *   them); `ignored`: the well-known non-resource scopes, as given.
 * @throws ScopeSyntaxError for the first invalid token.
 */
export function parseScopeList(input: string | string[] | undefined): {
  scopes: ResourceScope[];
  ignored: string[];
} {
  const parts = input === undefined ? [] : typeof input === 'string' ? [input] : input;
  const scopes: ResourceScope[] = [];
  const ignored: string[] = [];
  for (const token of parts.flatMap((part) => part.split(/\s+/)).filter((t) => t !== '')) {
    const scope = parseScope(token);
    if (scope === null) ignored.push(token);
    else scopes.push(scope);
  }
  return { scopes, ignored };
}

/**
 * Formats a scope in v2 syntax (docs/interface.md §5.3, §2.3 `fhir_server.scope`): `user/Patient.rs`,
 * `user/Questionnaire.rs?project=radiology&url=https%3A%2F%2F…`. Filter names and values are
 * encoded with `encodeURIComponent`, so `parseScope(formatScope(s))` gives `s` back.
 * Does not validate: give it scopes from `parseScope` or `downscope`.
 */
export function formatScope(scope: ResourceScope): string {
  const head = `${scope.context}/${scope.resourceType}.${scope.permissions.join('')}`;
  if (scope.filters.length === 0) return head;
  const query = scope.filters
    .map(([name, value]) => `${encodeURIComponent(name)}=${encodeURIComponent(value)}`)
    .join('&');
  return `${head}?${query}`;
}

/** Inputs of `downscope`, all known at session creation (docs/interface.md §5.3 rule 1). */
export interface DownscopeInput {
  /** From the session request, or the tenant's allowed scopes when the request had none. */
  requested: ResourceScope[];
  /** The data tenant's allowed scopes. */
  tenantAllowed: ResourceScope[];
  /** Tenant flag: EHR-managed tenants keep `system/` and get the rule 2 caps. */
  ehrManaged: boolean;
  /** The API client's service-account projects (docs/interface.md §5.3 rule 3). */
  projects: string[];
  /** The session has a patient (patient id or a Patient fhirContext item). */
  hasPatientContext: boolean;
}

const toUserContext = (scope: ResourceScope): ResourceScope =>
  scope.context === 'system' ? { ...scope, context: 'user' } : scope;

/**
 * One requested scope against one allowed scope: null when they do not overlap.
 * Project filters are alternatives (any of these projects), so when both sides name projects only
 * the common ones survive; appending them would let the request widen what the tenant allows.
 * Other filters are restrictions and are appended.
 */
const intersectScope = (requested: ResourceScope, allowed: ResourceScope): ResourceScope | null => {
  if (requested.context !== allowed.context) return null;
  let resourceType: string;
  if (requested.resourceType === '*') resourceType = allowed.resourceType;
  else if (allowed.resourceType === '*' || allowed.resourceType === requested.resourceType) {
    resourceType = requested.resourceType;
  } else return null;
  const permissions = intersect(requested.permissions, allowed.permissions);
  if (permissions.length === 0) return null;
  const allowedProjects = filterValues(allowed.filters, 'project');
  const requestedProjects = filterValues(requested.filters, 'project');
  let filters: [string, string][];
  if (allowedProjects.length > 0 && requestedProjects.length > 0) {
    const kept = requested.filters.filter(
      ([name, value]) => name !== 'project' || allowedProjects.includes(value),
    );
    if (!kept.some(([name]) => name === 'project')) return null;
    filters = [...kept, ...allowed.filters.filter(([name]) => name !== 'project')];
  } else {
    filters = [...requested.filters, ...allowed.filters];
  }
  return { context: requested.context, resourceType, permissions, filters };
};

const filterValues = (filters: readonly [string, string][], name: string): string[] =>
  filters.filter(([n]) => n === name).map(([, value]) => value);

/** docs/interface.md §5.3 rule 2 (EHR-managed tenants): caps context resources, expands `*`. */
const applyEhrRules = (scope: ResourceScope): ResourceScope[] => {
  const within = (resourceType: string, cap: readonly Permission[]): ResourceScope[] => {
    const permissions = intersect(scope.permissions, cap);
    return permissions.length === 0 ? [] : [{ ...scope, resourceType, permissions }];
  };
  if (scope.resourceType === '*') {
    return [
      ...within('QuestionnaireResponse', PERMISSIONS),
      ...within('Questionnaire', ['r', 's']),
      ...EHR_CONTEXT_TYPES.flatMap((type) => within(type, ['r'])),
    ];
  }
  if (EHR_CONTEXT_TYPES.includes(scope.resourceType)) return within(scope.resourceType, ['r']);
  return [scope];
};

/**
 * docs/interface.md §5.3 rule 3: every Questionnaire scope ends up with exactly one project filter, first,
 * naming one of the account's projects. A scope's project filters are alternatives; foreign ones
 * are ignored, and a scope that named only foreign projects is dropped rather than widened to all
 * of the account's projects.
 */
const constrainQuestionnaire = (scope: ResourceScope, projects: readonly string[]): ResourceScope[] => {
  const named = filterValues(scope.filters, 'project');
  const kept = named.length === 0 ? projects : named.filter((p) => projects.includes(p));
  const others = dedupeFilters(scope.filters.filter(([name]) => name !== 'project'));
  return [...new Set(kept)].map((project) => ({ ...scope, filters: [['project', project], ...others] }));
};

/** Drops exact repeats of a name=value pair (they arise when tenant filters are appended). */
const dedupeFilters = (filters: readonly [string, string][]): [string, string][] => {
  const seen = new Set<string>();
  return filters.filter(([name, value]) => {
    const key = `${encodeURIComponent(name)}=${encodeURIComponent(value)}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
};

/**
 * docs/interface.md §5.3 rule 3: Questionnaire access comes from the account's projects, never from `*`.
 * A `patient/*` scope adds none: Questionnaires are templates, outside any patient compartment.
 */
const applyProjectRules = (scope: ResourceScope, projects: readonly string[]): ResourceScope[] => {
  if (scope.resourceType === 'Questionnaire') return constrainQuestionnaire(scope, projects);
  if (scope.resourceType !== '*' || scope.context === 'patient') return [scope];
  const permissions = intersect(scope.permissions, ['r', 's']);
  const questionnaires: ResourceScope[] =
    permissions.length === 0
      ? []
      : projects.map((project) => ({
          context: scope.context,
          resourceType: 'Questionnaire',
          permissions,
          filters: [['project', project]],
        }));
  return [scope, ...new Map(questionnaires.map((q) => [formatScope(q), q])).values()];
};

/** Unites the permissions of scopes equal in context, type and filters; sorts by v2 text. */
const mergeScopes = (scopes: readonly ResourceScope[]): ResourceScope[] => {
  const byKey = new Map<string, ResourceScope>();
  for (const scope of scopes) {
    const key = formatScope({ ...scope, permissions: [] });
    const seen = byKey.get(key);
    byKey.set(
      key,
      seen === undefined ? scope : { ...seen, permissions: unite(seen.permissions, scope.permissions) },
    );
  }
  return [...byKey.values()]
    .map((scope) => ({ scope, text: formatScope(scope) }))
    .sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : 0))
    .map(({ scope }) => scope);
};

/**
 * Downscopes a session's requested scopes at creation (docs/interface.md §5.3 rules 1–3, contexts):
 * 1. `system/` becomes `user/` unless the tenant is EHR-managed (requested and allowed alike);
 * 2. intersection with the tenant's allowed scopes (same context; `*` on either side matches;
 *    permissions intersected; requested filters, then allowed filters);
 * 3. `patient/` scopes are dropped when the session has no patient context;
 * 4. EHR-managed tenants: Patient, Encounter, Practitioner, DocumentReference capped to `r`;
 *    `*` expands to QuestionnaireResponse (all), Questionnaire (∩ rs) and those four (∩ r).
 *    Applied to every context, not only `user/`: it only ever narrows;
 * 5. Questionnaire scopes are confined to the account's projects, one `project` filter each, and
 *    each surviving `*` scope with r or s adds `Questionnaire.<perms ∩ rs>?project=<p>` per project
 *    (a `*` scope itself never grants Questionnaire, see `scopesFor`);
 * 6. scopes equal but for permissions are merged; the result is sorted by `formatScope` text.
 *
 * @returns the effective scopes to store with the session (docs/interface.md §2.3 `fhir_server.scope`); may be empty.
 */
export function downscope(input: DownscopeInput): ResourceScope[] {
  const normalise = input.ehrManaged ? (s: ResourceScope) => s : toUserContext;
  const requested = input.requested.map(normalise);
  const allowed = input.tenantAllowed.map(normalise);
  let scopes = requested.flatMap((r) =>
    allowed.map((a) => intersectScope(r, a)).filter((s): s is ResourceScope => s !== null),
  );
  if (!input.hasPatientContext) scopes = scopes.filter((s) => s.context !== 'patient');
  if (input.ehrManaged) scopes = scopes.flatMap(applyEhrRules);
  scopes = scopes.flatMap((s) => applyProjectRules(s, input.projects));
  return mergeScopes(scopes);
}

/** One data-server access to check: the resource type and the v2 permission it needs. */
export interface AccessRequest {
  resourceType: string;
  permission: Permission;
}

/**
 * The scopes that grant `request.permission` on `request.resourceType` (docs/interface.md §5.3 rule 1: every
 * data-server request is checked; none → 403). The caller still applies each scope's context
 * (`patient/` → the launched patient, `user/` → the user's own resources, `system/` → tenant) and,
 * for Questionnaire, its filters; any one surviving scope grants access.
 *
 * A `*` scope matches every resource type except Questionnaire: Questionnaire access comes only
 * from explicit, project-filtered Questionnaire scopes (docs/interface.md §5.3 rule 3; `downscope` adds them
 * for `*` scopes).
 */
export function scopesFor(scopes: ResourceScope[], request: AccessRequest): ResourceScope[] {
  return scopes.filter(
    (scope) =>
      (scope.resourceType === request.resourceType ||
        (scope.resourceType === '*' && request.resourceType !== 'Questionnaire')) &&
      scope.permissions.includes(request.permission),
  );
}
