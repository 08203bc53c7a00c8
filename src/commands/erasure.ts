/**
 * Erasing a patient (docs/architecture.md "Erasure"; `POST {fhir}/Patient/{id}/$erase`, `casebook
 * erase`): records `PatientErased` (PHI-free: the references of the patient's compartment, the
 * reason), whose projection turns every row of the compartment into a tombstone (410 Gone, no
 * content, no identifiers) in the same transaction, then destroys the patient's data key, which
 * leaves every event about the patient unreadable for good. Idempotent: erasing again records
 * nothing and destroys the key again, so an erasure cut short after its event (kill -9) completes.
 */

import type { Sql } from '../db/sql.js';
import type { AuditEntity, AuditRecord } from '../domain/audit/audit.js';
import { DomainError } from '../domain/decider.js';
import { type ErasedResource, erasureDecider, erasureStream } from '../domain/erasure/erasure.js';
import { tenantDecider, tenantStream } from '../domain/tenant/tenant.js';
import type { KeyStore } from '../eventstore/shredding/key-store.js';
import { patientSubject } from '../fhir/phi.js';
import { exportKeysOf } from '../queries/read-models.js';
import { erasedPatients, patientCompartment, readResource } from '../queries/resources.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';

const DAY_MS = 86_400_000;

/** What an erasure did. */
export interface ErasureOutcome {
  /** The resources erased now (none when the patient was erased before). */
  readonly erased: readonly ErasedResource[];
  /** True when the patient had been erased before (this call only made sure of its key). */
  readonly already: boolean;
  /**
   * The idempotency keys of the patient's exported reports (read before the outbox forgets them):
   * for removing what a drop directory of this installation still holds.
   */
  readonly exportKeys: readonly string[];
  /** The AuditEvent appended with the erasure (`options.audit`); undefined when none was. */
  readonly audited?: AuditRecord;
}

/**
 * The entity of an erasure's AuditEvent: the Patient, and why (docs/interface.md §4.3 rule 17:
 * the AuditEvent says who, when and why); a forced erasure says so before the reason.
 */
export const erasureAuditEntity = (patientId: number, reason: string, forced: boolean): AuditEntity => ({
  reference: `Patient/${patientId}`,
  patientId,
  reason: forced ? `forced inside the retention period: ${reason.trim()}` : reason.trim(),
});

/**
 * Erases Patient `patientId` of the context's tenant.
 * @param keys the key store whose data key of the patient is destroyed.
 * @param input.reason why (1–1000 characters, recorded); `force`: inside a retention period.
 * @param options.audit the erasure's AuditEvent (who, when, why: its entity's `reason`), appended in
 *   the same append as `PatientErased` so neither is recorded without the other; not called when
 *   the patient was erased before (nothing is appended: the caller records that request as usual).
 * @throws {DomainError} `not_found` when the tenant has no such patient and never had it erased;
 *   `invalid` for a missing or too long reason; `unprocessable` (RetentionPeriod) inside the
 *   tenant's retention period without `force`.
 */
export const erasePatient = async (
  ctx: CommandContext,
  keys: KeyStore,
  input: { patientId: number; reason: string; force?: boolean },
  options: { audit?: (erased: readonly ErasedResource[]) => AuditRecord | undefined } = {},
): Promise<ErasureOutcome> => {
  const tenantId = ctx.tenantId;
  if (tenantId === null) throw new DomainError('invalid', 'TenantRequired', 'an erasure is made in a tenant');
  const { patientId } = input;
  const compartment = await patientCompartment(ctx.sql, tenantId, patientId);
  const resources = compartment.map(({ resourceType, id }) => ({ resourceType, id }));
  const exportKeys = await exportKeysOf(
    ctx.sql,
    tenantId,
    resources.filter((r) => r.resourceType === 'QuestionnaireResponse').map((r) => r.id),
  );
  const { events, audited } = await execute(
    ctx,
    async (uow) => {
      const state = await uow.load(erasureStream(patientId), erasureDecider);
      if (state.status === 'none' && !(await readResource(ctx.sql, 'Patient', patientId, tenantId)))
        throw new DomainError('not_found', 'PatientNotFound', `Patient/${patientId} is not known`);
      const tenant = await uow.load(tenantStream(tenantId), tenantDecider);
      const retentionDays = tenant.status === 'active' ? tenant.retentionDays : undefined;
      if (state.status === 'none' && retentionDays !== undefined && input.force !== true) {
        const last = Math.max(0, ...compartment.map((r) => r.lastUpdated.getTime()));
        const keptUntil = new Date(last + retentionDays * DAY_MS);
        if (keptUntil > ctx.now)
          throw new DomainError(
            'unprocessable',
            'RetentionPeriod',
            `Patient/${patientId} must be kept until ${keptUntil.toISOString()} (the tenant's retention period of ${retentionDays} days since its last change); erase with force and a reason to erase it now`,
            undefined,
            { issueCode: 'business-rule' },
          );
      }
      return uow.decide(erasureStream(patientId), erasureDecider, {
        type: 'ErasePatient',
        patientId,
        tenantId,
        resources,
        reason: input.reason,
        forced: input.force === true,
        now: uow.now,
      });
    },
    options.audit ? { audit: () => options.audit?.(resources) } : {},
  );
  // After the event: a crash between the two leaves the event, and erasing again destroys the key.
  await keys.destroy(tenantId, patientSubject(patientId));
  return {
    erased: events.length > 0 ? resources : [],
    already: events.length === 0,
    exportKeys,
    ...(audited ? { audited } : {}),
  };
};

/**
 * Completes erasures cut short between their event and their key (a crash, kill -9): destroys the
 * data key of every erased Patient (a tombstone row) that still has one. Run at every start
 * (src/casebook.ts); a key already destroyed stays so.
 * @returns how many keys it destroyed now.
 */
export const completeErasures = async (sql: Sql, keys: KeyStore): Promise<number> => {
  let completed = 0;
  for (const { tenantId, id } of await erasedPatients(sql)) {
    const outcome = await keys.destroy(tenantId, patientSubject(id));
    if (outcome.destroyed) completed++;
  }
  return completed;
};
