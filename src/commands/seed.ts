/**
 * The seed file (`CASEBOOK_SEED`, README.md "Configuration"), applied idempotently as ordinary commands, and
 * the demo bootstrap for an empty store.
 */

import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { DomainError } from '../domain/decider.js';
import { IDENTIFIER_HASHING_CHOSEN } from '../domain/reservation/identifier-hashing.js';
import { reservationDecider, reservationStream } from '../domain/reservation/reservation.js';
import type { Actor, EventStore } from '../eventstore/port.js';
import { DEFINITIONS } from '../fhir/definitions.js';
import { searchResources } from '../queries/resources.js';
import type { CommandContext } from './context.js';
import { execute } from './handler.js';
import { createResource, loadResource, updateResource, versionOf } from './resources.js';
import { generateSecret } from './secrets.js';
import { createTenant, registerClient } from './tenants.js';

const scopeText = z
  .union([z.string(), z.array(z.string())])
  .transform((v) => (Array.isArray(v) ? v : v.split(/\s+/).filter(Boolean)));

export const seedSchema = z
  .object({
    tenants: z.array(
      z
        .object({
          name: z.string().min(1),
          ehr_managed: z.boolean().default(false),
          allowed_scopes: scopeText.default([]),
          redirect_origins: z.array(z.string()).default([]),
          /** The identifier system of the tenant's MRNs, shown in the patient banner (issue 32). */
          mrn_system: z.string().min(1).optional(),
          /** Origins Subscription endpoints may use (issue 37), besides SUBSCRIPTION_ALLOWED_ORIGINS. */
          subscription_origins: z.array(z.string()).optional(),
          retention_days: z.number().int().min(0).max(36_500).optional(),
          clients: z
            .array(
              z
                .object({
                  client_id: z.string(),
                  client_secret: z.string(),
                  scopes: scopeText.default([]),
                  projects: z.array(z.string()).default([]),
                })
                .strict(),
            )
            .default([]),
          questionnaires: z
            .array(
              z
                .object({
                  project: z.string().min(1),
                  // The url (with version) identifies the Questionnaire, so applying a seed again updates it.
                  resource: z
                    .record(z.string(), z.unknown())
                    .refine((r) => typeof r.url === 'string', 'a seeded Questionnaire needs a url'),
                })
                .strict(),
            )
            .default([]),
        })
        .strict(),
    ),
  })
  .strict();

export type Seed = z.infer<typeof seedSchema>;

/**
 * Reads and validates a seed file.
 * @throws {Error} with every problem when the file is unreadable or invalid.
 */
export const readSeed = (path: string): Seed => {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new Error(`seed ${path}: ${(error as Error).message}`);
  }
  const parsed = seedSchema.safeParse(raw);
  if (!parsed.success)
    throw new Error(
      `seed ${path}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  return parsed.data;
};

export interface SeedReport {
  readonly tenants: { name: string; id: number; created: boolean }[];
  readonly clients: { clientId: string; created: boolean }[];
  readonly questionnaires: {
    id: number;
    url: string | null;
    version: string | null;
    project: string;
    outcome: QuestionnaireOutcome;
  }[];
}

export type QuestionnaireOutcome = 'created' | 'updated' | 'unchanged';

/** Reservation key of a seeded Questionnaire's canonical (`url|version`) in a tenant. */
const canonicalKey = (tenantId: number, url: string, version: string | undefined) =>
  `Questionnaire-canonical:${tenantId}:${url}|${version ?? ''}`;

/**
 * Creates a Questionnaire of `project` in the tenant, or, when one with the same `url` and
 * `version` exists there, updates it (issue 3: Questionnaires are created by seed, CLI or POST).
 * Idempotent against the log: the canonical is reserved in the same append as the creation, so a
 * seed applied again (after a cut-short replay, say) finds the Questionnaire it created before.
 * @throws {ZodError} invalid Questionnaire; {DomainError} when the url|version belongs to another project.
 */
export const upsertQuestionnaire = async (
  ctx: CommandContext,
  tenantId: number,
  project: string,
  resource: Record<string, unknown>,
): Promise<{ id: number; outcome: QuestionnaireOutcome }> => {
  const def = DEFINITIONS.Questionnaire;
  const content = def.parse({ ...resource, resourceType: 'Questionnaire' }, 'create');
  const url = typeof content.url === 'string' ? content.url : undefined;
  const version = typeof content.version === 'string' ? content.version : undefined;
  const { result } = await execute({ ...ctx, tenantId }, async (uow) => {
    const key = url ? canonicalKey(tenantId, url, version) : undefined;
    let existing: number | undefined;
    if (key) {
      const reservation = await uow.load(reservationStream(key), reservationDecider);
      if (reservation.status === 'claimed') existing = Number(reservation.ownerId);
      else {
        // One created by POST before: adopt it.
        const rows = await searchResources(uow.ctx.sql, 'Questionnaire', tenantId, {
          elements: [{ element: 'url', values: [url!] }],
          limit: 100,
        });
        existing = rows.find((m) => (m.resource.version ?? undefined) === version)?.id;
      }
    }
    const state =
      existing !== undefined ? await loadResource(uow, 'Questionnaire', existing, tenantId) : undefined;
    if (existing !== undefined && state?.status === 'active') {
      if (state.project !== project)
        throw new DomainError(
          'conflict',
          'QuestionnaireInOtherProject',
          `${url}|${version ?? ''} belongs to project ${state.project}`,
        );
      const before = versionOf(uow, 'Questionnaire', existing);
      const updated = await updateResource(uow, def, tenantId, existing, content);
      if (key)
        await uow.decide(reservationStream(key), reservationDecider, {
          type: 'ClaimReservation',
          key,
          ownerType: 'Questionnaire',
          ownerId: String(existing),
          now: uow.now,
        });
      return {
        id: existing,
        outcome: (updated.versionId === before ? 'unchanged' : 'updated') as QuestionnaireOutcome,
      };
    }
    const created = await createResource(uow, def, tenantId, content, { project });
    if (key) {
      // The reservation of a deleted Questionnaire moves to the new one.
      const stream = reservationStream(key);
      const held = await uow.load(stream, reservationDecider);
      if (held.status === 'claimed')
        await uow.decide(stream, reservationDecider, {
          type: 'ReleaseReservation',
          ownerType: held.ownerType,
          ownerId: held.ownerId,
          now: uow.now,
        });
      await uow.decide(stream, reservationDecider, {
        type: 'ClaimReservation',
        key,
        ownerType: 'Questionnaire',
        ownerId: String(created.id),
        now: uow.now,
      });
    }
    return { id: created.id, outcome: 'created' as QuestionnaireOutcome };
  });
  return result;
};

/**
 * What applying a seed needs of the composition root (src/casebook.ts satisfies it): a command
 * context for a cause. Commands sit below the composition root (docs/architecture.md "Layers").
 */
export interface SeedTarget {
  context(cause: { tenantId: number | null; actor: Actor }): CommandContext;
}

/**
 * Applies a seed: tenants and clients are created when missing and converged when present, so
 * applying the same seed twice appends nothing the second time.
 */
export const applySeed = async (casebook: SeedTarget, seed: Seed): Promise<SeedReport> => {
  const report: SeedReport = { tenants: [], clients: [], questionnaires: [] };
  for (const t of seed.tenants) {
    const ctx = casebook.context({ tenantId: null, actor: { type: 'system', id: 'seed' } });
    const { tenantId, created } = await createTenant(
      ctx,
      {
        name: t.name,
        ehrManaged: t.ehr_managed,
        allowedScopes: t.allowed_scopes,
        redirectOrigins: t.redirect_origins,
        ...(t.mrn_system ? { mrnSystem: t.mrn_system } : {}),
        subscriptionOrigins: t.subscription_origins ?? [],
        ...(t.retention_days !== undefined ? { retentionDays: t.retention_days } : {}),
      },
      { ensure: true },
    );
    report.tenants.push({ name: t.name, id: tenantId, created });
    for (const c of t.clients) {
      const result = await registerClient(
        { ...ctx, tenantId },
        { clientId: c.client_id, tenantId, secret: c.client_secret, scopes: c.scopes, projects: c.projects },
        { ensure: true },
      );
      report.clients.push({ clientId: c.client_id, created: result.created });
    }
    for (const q of t.questionnaires) {
      const { id, outcome } = await upsertQuestionnaire(
        { ...ctx, tenantId },
        tenantId,
        q.project,
        q.resource,
      );
      report.questionnaires.push({
        id,
        url: typeof q.resource.url === 'string' ? q.resource.url : null,
        version: typeof q.resource.version === 'string' ? q.resource.version : null,
        project: q.project,
        outcome,
      });
    }
  }
  return report;
};

/** The demo Questionnaire: a short chest X-ray report (README walkthrough). */
export const DEMO_QUESTIONNAIRE: Record<string, unknown> = {
  resourceType: 'Questionnaire',
  url: 'https://casebook.dev/fhir/Questionnaire/demo-chest-xray',
  version: '1.0.0',
  name: 'DemoChestXray',
  title: 'Chest X-ray report',
  status: 'active',
  // SDC population: the patient launch context fills the patient's name and date of birth.
  extension: [
    {
      url: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-launchContext',
      extension: [
        {
          url: 'name',
          valueCoding: { system: 'http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext', code: 'patient' },
        },
        { url: 'type', valueCode: 'Patient' },
      ],
    },
  ],
  item: [
    {
      linkId: 'patient',
      text: 'Patient',
      type: 'group',
      item: [
        {
          linkId: 'patient.name',
          text: 'Name',
          type: 'string',
          readOnly: true,
          extension: [
            {
              url: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-initialExpression',
              valueExpression: {
                language: 'text/fhirpath',
                expression: "%patient.name.first().select(given.first() & ' ' & family)",
              },
            },
          ],
        },
        {
          linkId: 'patient.birthDate',
          text: 'Date of birth',
          type: 'date',
          readOnly: true,
          extension: [
            {
              url: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-initialExpression',
              valueExpression: { language: 'text/fhirpath', expression: '%patient.birthDate' },
            },
          ],
        },
      ],
    },
    { linkId: 'indication', text: 'Clinical indication', type: 'string', required: true },
    {
      linkId: 'findings',
      text: 'Findings',
      type: 'group',
      item: [
        {
          linkId: 'findings.lungs',
          text: 'Lungs',
          type: 'coding',
          required: true,
          answerOption: [
            {
              valueCoding: {
                system: 'https://casebook.dev/fhir/CodeSystem/demo',
                code: 'clear',
                display: 'Clear',
              },
            },
            {
              valueCoding: {
                system: 'https://casebook.dev/fhir/CodeSystem/demo',
                code: 'consolidation',
                display: 'Consolidation',
              },
            },
            {
              valueCoding: {
                system: 'https://casebook.dev/fhir/CodeSystem/demo',
                code: 'effusion',
                display: 'Pleural effusion',
              },
            },
          ],
        },
        { linkId: 'findings.heart-enlarged', text: 'Heart enlarged', type: 'boolean' },
        { linkId: 'findings.other', text: 'Other findings', type: 'text' },
      ],
    },
    { linkId: 'impression', text: 'Impression', type: 'text', required: true },
  ],
};

/** The demo client's id (README walkthrough). */
export const DEMO_CLIENT_ID = 'demo-ehr';

/**
 * With an empty store and no seed, creates a demo tenant and client so the README walkthrough
 * works (issue 2 §4). Returns the generated secret, or undefined when the store was not empty.
 * A store is empty when its log holds nothing but the choice of identifier hashing, which every
 * new store records first (src/commands/identifier-naming.ts).
 */
export const bootstrapDemo = async (
  casebook: SeedTarget & { readonly store: EventStore },
): Promise<{ clientId: string; clientSecret: string } | undefined> => {
  const first = await casebook.store.readAll({ maxCount: 2 });
  if (first.some((e) => e.type !== IDENTIFIER_HASHING_CHOSEN)) return undefined;
  const clientSecret = generateSecret();
  await applySeed(casebook, {
    tenants: [
      {
        name: 'Demo Hospital',
        ehr_managed: false,
        allowed_scopes: ['patient/*.*', 'user/*.*'],
        redirect_origins: ['http://localhost:3000'],
        clients: [
          {
            client_id: DEMO_CLIENT_ID,
            client_secret: clientSecret,
            scopes: ['system/*.*'],
            projects: ['demo'],
          },
        ],
        questionnaires: [{ project: 'demo', resource: DEMO_QUESTIONNAIRE }],
      },
    ],
  });
  return { clientId: DEMO_CLIENT_ID, clientSecret };
};
