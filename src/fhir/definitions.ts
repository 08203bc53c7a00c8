/**
 * What casebook knows about each resource type it stores (issue 3): how a request body becomes
 * stored content, whether updates are partial (spec §4.3 rule 3), whether identifiers are unique
 * in the tenant (spec §4.3 rule 1), which references must resolve, and what blocks a delete
 * (spec §4.3 rule 4).
 */
import type { Content, ResourceType } from '../domain/fhir/resource.js';

export interface ReferenceToCheck {
  /** FHIRPath of the element, for OperationOutcome.issue.expression. */
  readonly expression: string;
  readonly resourceType: ResourceType;
  readonly id: number;
}

export interface ResourceDefinition {
  readonly type: ResourceType;
  /**
   * Turns a request body into content (no resourceType/id/meta).
   * `mode` `update` allows omitting elements required on create (partial updates).
   * @throws {ZodError} or {DomainError} for invalid content (answered 422).
   */
  readonly parse: (body: unknown, mode: 'create' | 'update') => Content;
  /** spec §4.3 rule 3: omitted elements stay unchanged, a given identifier list replaces the old one. */
  readonly partialUpdate: boolean;
  /** spec §4.3 rule 1: an identifier belongs to at most one resource of this type in a tenant. */
  readonly uniqueIdentifiers: boolean;
  /** The literal references in `content` that must point at existing resources of the tenant. */
  readonly references: (content: Content) => ReferenceToCheck[];
  /** spec §4.3 rule 4: resource types whose live resources, referencing this one, block its delete. */
  readonly deleteBlockedBy: readonly ResourceType[];
}
