/** zod schemas of the session interface (docs/interface.md §2.1, §2.2, §4.1). */
import { z } from 'zod';

/** docs/interface.md §2.1: data-server ids are integers. */
const resourceId = z.number().int().positive().max(2_147_483_647);

const identifier = z
  .object({
    system: z.string().min(1, 'system is required').max(1024),
    value: z.string().min(1, 'value is required').max(1024),
  })
  .strict();

/** docs/interface.md §2.2 role: `https://<service-domain>/fhir/role/new` or `…/find`; omitted = launch. */
const ROLE_PATTERN = /^https:\/\/[^/\s]+\/fhir\/role\/(new|find|launch)$/;

const contextItem = z
  .object({
    identifier,
    type: z.enum(['Patient', 'Encounter', 'Practitioner']),
    role: z
      .string()
      .regex(
        ROLE_PATTERN,
        'role must be https://<service-domain>/fhir/role/new or …/fhir/role/find (or omitted)',
      )
      .optional(),
  })
  .strict()
  .transform((item) => ({
    identifier: item.identifier,
    type: item.type,
    role: (item.role ? ROLE_PATTERN.exec(item.role)![1] : 'launch') as 'new' | 'find' | 'launch',
  }));

/** POST /sessions body (docs/interface.md §2.1). Unknown fields are refused so a misspelt field is not silently dropped. */
export const createSessionBody = z
  .object({
    scope: z.union([z.string().max(8192), z.array(z.string().max(1024)).max(200)]).nullish(),
    patient: resourceId.nullish(),
    encounter: resourceId.nullish(),
    user: resourceId.nullish(),
    fhirContext: z
      .array(contextItem)
      .max(10)
      .nullish()
      .refine((items) => !items || new Set(items.map((i) => i.type)).size === items.length, {
        message: 'at most one fhirContext item per type',
      }),
    deployment_mode: z.enum(['embedded', 'standalone']).nullish(),
    post_submit_redirect: z.string().max(2048).nullish(),
    post_cancel_redirect: z.string().max(2048).nullish(),
  })
  .strict();

/** GET query or POST form of /sessions/$handover (docs/interface.md §4.1 handover rules 1–2). */
export const handoverParams = z.object({
  token: z.string({ error: 'token is required' }).min(1, 'token is required').max(256),
  next: z.string({ error: 'next is required' }).min(1, 'next is required').max(2048),
});
