/**
 * The FHIR R5 Subscription body casebook accepts (issue 37; FHIR R5 subscription.html;
 * docs/interface.md "Subscriptions"): a topic casebook publishes, channel `rest-hook`, an http(s)
 * endpoint, payload `empty`, `id-only` or `full-resource`, and filters the topic can apply.
 * Unknown elements are refused (a `parameter` would add headers casebook does not send).
 */
import { z } from 'zod';
import { FILTER_PARAMETERS, topicByUrl } from '../domain/subscription/topics.js';
import { codeableConcept, envelope } from './common.schema.js';

/** Extension URL of the secret shown once, in the create response (issue 37). */
export const SUBSCRIPTION_SECRET_EXTENSION =
  'https://casebook.dev/fhir/StructureDefinition/subscription-secret';

const unsignedInt = z.number().int().min(0).max(2_147_483_647);

export const subscriptionSchema = z
  .object({
    ...envelope('Subscription'),
    identifier: z.array(z.unknown()).optional(),
    name: z.string().max(1000).optional(),
    status: z.enum(['requested', 'active', 'error', 'off', 'entered-in-error']).optional(),
    topic: z.string().refine((url) => topicByUrl(url) !== undefined, {
      message: 'is not a SubscriptionTopic this server publishes (GET SubscriptionTopic lists them)',
    }),
    contact: z.array(z.unknown()).optional(),
    end: z.string().optional(),
    reason: z.string().max(10_000).optional(),
    filterBy: z
      .array(
        z
          .object({
            resourceType: z.string().optional(),
            filterParameter: z.enum(FILTER_PARAMETERS, {
              error: `filterParameter must be one of ${FILTER_PARAMETERS.join(', ')}`,
            }),
            comparator: z.literal('eq').optional(),
            modifier: z.string().optional(),
            value: z.string().min(1).max(1000),
          })
          .strict(),
      )
      .max(20)
      .optional(),
    channelType: codeableConcept.and(
      z.object({
        system: z.literal('http://terminology.hl7.org/CodeSystem/subscription-channel-type').optional(),
        code: z.literal('rest-hook', {
          error: 'channelType.code must be rest-hook (websocket is not offered)',
        }),
      }),
    ),
    endpoint: z.string().max(2000),
    heartbeatPeriod: unsignedInt.min(1).optional(),
    timeout: unsignedInt.min(1).optional(),
    contentType: z.enum(['application/fhir+json', 'application/json']).optional(),
    content: z.enum(['empty', 'id-only', 'full-resource']).optional(),
    maxCount: z.number().int().min(1).max(100).optional(),
    extension: z.array(z.object({ url: z.string() }).passthrough()).optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    const topic = topicByUrl(s.topic);
    s.filterBy?.forEach((f, i) => {
      if (topic && !topic.canFilterBy.includes(f.filterParameter))
        ctx.addIssue({
          code: 'custom',
          path: ['filterBy', i, 'filterParameter'],
          message: `the topic cannot filter by ${f.filterParameter} (it can by ${topic.canFilterBy.join(', ')})`,
        });
      if (f.resourceType !== undefined && topic && f.resourceType !== topic.resource)
        ctx.addIssue({
          code: 'custom',
          path: ['filterBy', i, 'resourceType'],
          message: `must be ${topic.resource}`,
        });
    });
    let url: URL | undefined;
    try {
      url = new URL(s.endpoint);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
      ctx.addIssue({ code: 'custom', path: ['endpoint'], message: 'must be an absolute http or https URL' });
    else if (url.username || url.password)
      ctx.addIssue({ code: 'custom', path: ['endpoint'], message: 'must not carry credentials' });
  });

export type SubscriptionBody = z.infer<typeof subscriptionSchema>;
