/**
 * The seed file (`CASEBOOK_SEED`, DESIGN.md §5), applied idempotently as ordinary commands, and
 * the demo bootstrap for an empty store.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { Casebook } from '../casebook.js';
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
            .array(z.object({ project: z.string(), resource: z.record(z.string(), z.unknown()) }).strict())
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
}

/**
 * Applies a seed: tenants and clients are created when missing and converged when present, so
 * applying the same seed twice appends nothing the second time.
 */
export const applySeed = async (casebook: Casebook, seed: Seed): Promise<SeedReport> => {
  const report: SeedReport = { tenants: [], clients: [] };
  for (const t of seed.tenants) {
    const ctx = casebook.context({ tenantId: null, actor: { type: 'system', id: 'seed' } });
    const { tenantId, created } = await createTenant(
      ctx,
      {
        name: t.name,
        ehrManaged: t.ehr_managed,
        allowedScopes: t.allowed_scopes,
        redirectOrigins: t.redirect_origins,
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
  }
  return report;
};

/** The demo client's id (README walkthrough). */
export const DEMO_CLIENT_ID = 'demo-ehr';

/**
 * With an empty store and no seed, creates a demo tenant and client so the README walkthrough
 * works (issue 2 §4). Returns the generated secret, or undefined when the store was not empty.
 */
export const bootstrapDemo = async (
  casebook: Casebook,
): Promise<{ clientId: string; clientSecret: string } | undefined> => {
  if ((await casebook.store.headPosition()) !== undefined) return undefined;
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
        questionnaires: [],
      },
    ],
  });
  return { clientId: DEMO_CLIENT_ID, clientSecret };
};
