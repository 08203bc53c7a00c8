/**
 * Scope enforcement on the data server (docs/interface.md §5 rule 4, §5.3; issue 3 "Authentication").
 * API clients are governed by their own scopes, tenant-wide. Sessions are governed by their stored
 * v2 scopes: `system/` tenant-wide, `patient/` only inside the session patient's compartment,
 * `user/` only what the session user authored (and the user's own Practitioner). Questionnaire
 * access comes only from project-filtered Questionnaire scopes (docs/interface.md §5.3 rule 3).
 */
import { comparableText } from '../domain/clinical/identifier.js';
import { DomainError } from '../domain/decider.js';
import type { Content, ResourceType } from '../domain/fhir/resource.js';
import type { Actor } from '../eventstore/port.js';
import { compartmentOf, identifiersOf } from './references.js';
import { type Permission, type ResourceScope, scopesFor } from './scopes.js';

/** Who is calling the data server. */
export interface Principal {
  readonly kind: 'client' | 'session';
  readonly tenantId: number;
  readonly actor: Actor;
  readonly scopes: readonly ResourceScope[];
  /** The API client's projects (for a session: those of the client that created it). */
  readonly projects: readonly string[];
  /** Session patient id (`patient/` compartment), null without one or for clients. */
  readonly patientId: number | null;
  /** `Practitioner/<id>` of the session user, null for clients. */
  readonly userRef: string | null;
}

/** The facts about a resource a scope decision needs. */
export interface AccessTarget {
  readonly resourceType: ResourceType;
  readonly id?: number;
  readonly patientId?: number | null;
  readonly author?: string | null;
  readonly project?: string | null;
  readonly content?: Content;
}

/** The scope-relevant facts of a stored resource (a read-model row). */
export const targetOf = (row: {
  readonly resourceType: ResourceType;
  readonly id: number;
  readonly patientId: number | null;
  readonly author: string | null;
  readonly project: string | null;
  readonly resource: Content;
  /** Set on a row read as text (src/projections/resources.ts readResource): `resource` parses it. */
  readonly json?: string;
}): AccessTarget => {
  const facts = {
    resourceType: row.resourceType,
    id: row.id,
    patientId: row.patientId,
    author: row.author,
    project: row.project,
  };
  if (row.json === undefined) return { ...facts, content: row.resource };
  // Parsed only when a scope decision looks at the content (most reads never do).
  return Object.defineProperty(facts, 'content', {
    get: () => row.resource,
    enumerable: true,
  }) as AccessTarget;
};

/** The scope-relevant facts of content about to be written (`id` undefined for a create). */
export const targetOfContent = (
  type: ResourceType,
  id: number | undefined,
  content: Content,
  extra: { author?: string | null; project?: string | null },
): AccessTarget => ({
  resourceType: type,
  ...(id !== undefined ? { id } : {}),
  patientId:
    compartmentOf(type, id ?? 0, content).patientId ?? (type === 'Patient' && id !== undefined ? id : null),
  author: extra.author ?? null,
  project: extra.project ?? null,
  content,
});

const PERMISSION_NAMES: Record<Permission, string> = {
  c: 'create',
  r: 'read',
  u: 'update',
  d: 'delete',
  s: 'search',
};

/** Does one Questionnaire scope's filters admit the Questionnaire (docs/interface.md §5.3 rule 3)? */
const questionnaireFiltersAdmit = (scope: ResourceScope, target: AccessTarget): boolean => {
  const content = target.content ?? {};
  return scope.filters.every(([name, value]) => {
    switch (name) {
      case 'project':
        return target.project === value;
      case 'url':
        return content.url === value;
      case 'version':
        return content.version === value;
      case 'identifier': {
        const [system, code] = value.includes('|') ? value.split('|', 2) : [undefined, value];
        // Compared in NFC, as every identifier match (docs/interface.md §2.5).
        return identifiersOf(content).some(
          (i) =>
            comparableText(i.value) === comparableText(code!) &&
            (system === undefined || system === '' || comparableText(i.system) === comparableText(system)),
        );
      }
      case 'specialty':
        return JSON.stringify(content.useContext ?? []).includes(JSON.stringify(value));
      default:
        return false;
    }
  });
};

/**
 * Does `scope` (already matching type and permission) cover every resource of `resourceType`,
 * whatever its facts? An API client's scopes and `system/` scopes are tenant-wide; Questionnaire
 * scopes always look at the Questionnaire's project and filters.
 */
const coversAll = (principal: Principal, scope: ResourceScope, resourceType: ResourceType): boolean =>
  resourceType !== 'Questionnaire' && (principal.kind === 'client' || scope.context === 'system');

/** Does `scope` (already matching type and `permission`) cover `target` for `principal`? */
const covers = (
  principal: Principal,
  scope: ResourceScope,
  target: AccessTarget,
  permission: Permission,
): boolean => {
  if (target.resourceType === 'Questionnaire') return questionnaireFiltersAdmit(scope, target);
  if (coversAll(principal, scope, target.resourceType)) return true;
  switch (scope.context) {
    case 'system':
      return true; // tenant-wide (coversAll)
    case 'patient':
      // A Medication belongs to no patient's compartment (FHIR R5 compartmentdefinition-patient):
      // it is what a MedicationStatement of the patient names, so `patient/Medication.rs` reads
      // and searches the tenant's Medications once the session has a patient — never writes them
      // (docs/interface.md §5.3).
      return (
        principal.patientId !== null &&
        (target.patientId === principal.patientId ||
          (target.resourceType === 'Medication' && (permission === 'r' || permission === 's')))
      );
    case 'user':
      return (
        (principal.userRef !== null && target.author === principal.userRef) ||
        (target.resourceType === 'Practitioner' && principal.userRef === `Practitioner/${target.id}`)
      );
  }
};

/** True when some scope grants `permission` on `target`. */
export const isAllowed = (principal: Principal, permission: Permission, target: AccessTarget): boolean =>
  scopesFor([...principal.scopes], { resourceType: target.resourceType, permission }).some((scope) =>
    covers(principal, scope, target, permission),
  );

/**
 * True when some scope grants `permission` on every resource of `resourceType` in the tenant, so
 * that no resource of the type is hidden from `principal` (a count before scopes then tells it
 * nothing it may not know: `_total=estimate`, docs/interface.md §4.3 rule 10).
 */
export const coversEveryResource = (
  principal: Principal,
  permission: Permission,
  resourceType: ResourceType,
): boolean =>
  scopesFor([...principal.scopes], { resourceType, permission }).some((scope) =>
    coversAll(principal, scope, resourceType),
  );

/** True when some scope grants `permission` on `resourceType` at all (before looking at a resource). */
export const mayAtAll = (principal: Principal, permission: Permission, resourceType: ResourceType): boolean =>
  scopesFor([...principal.scopes], { resourceType, permission }).length > 0;

/**
 * Refuses an erasure (docs/architecture.md "Erasure") unless `principal` is an API client granted
 * `system/Patient.d` (or `system/*.d`) without filters: a tenant-wide, deliberate grant, never a
 * clinician's session.
 * @throws {DomainError} forbidden.
 */
export const authorizeErasure = (principal: Principal): void => {
  const granted =
    principal.kind === 'client' &&
    principal.scopes.some(
      (s) =>
        s.context === 'system' &&
        (s.resourceType === 'Patient' || s.resourceType === '*') &&
        s.permissions.includes('d') &&
        s.filters.length === 0,
    );
  if (!granted)
    throw new DomainError(
      'forbidden',
      'ScopeNotGranted',
      `${scopesOwner(principal)} scopes do not allow erasing a patient: it takes system/Patient.d`,
      undefined,
      { issueCode: 'forbidden' },
    );
};

/** Whose scopes refused a request, for its message: `the client's` or `the session's`. */
export const scopesOwner = (principal: Principal): string =>
  principal.kind === 'client' ? "the client's" : "the session's";

/**
 * Refuses a request its scopes do not cover (docs/interface.md §5.3 rule 1, §7: 403 `forbidden`).
 * @throws {DomainError} forbidden.
 */
export const authorize = (principal: Principal, permission: Permission, target: AccessTarget): void => {
  if (!isAllowed(principal, permission, target))
    throw new DomainError(
      'forbidden',
      'ScopeNotGranted',
      `${scopesOwner(principal)} scopes do not allow ${PERMISSION_NAMES[permission]} on ${
        target.id !== undefined ? `${target.resourceType}/${target.id}` : target.resourceType
      }`,
      undefined,
      { issueCode: 'forbidden' },
    );
};
