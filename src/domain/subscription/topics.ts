/**
 * The SubscriptionTopics casebook publishes (issue 37; FHIR R5 subscriptions.html,
 * subscriptiontopic.html; docs/interface.md "Subscriptions"), and which stored events trigger
 * them. Pure: the notifier calls {@link triggeredTopics} on each event of the log, in log order.
 */
import type { Content } from '../fhir/resource.js';

/** Canonical URL of the report topic. */
export const REPORT_TOPIC_URL = 'https://casebook.dev/fhir/SubscriptionTopic/report-status';
/** Canonical URL of the Task topic. */
export const TASK_TOPIC_URL = 'https://casebook.dev/fhir/SubscriptionTopic/task-status';

/** The filter parameters a Subscription may give (`filterBy.filterParameter`). */
export const FILTER_PARAMETERS = ['patient', 'encounter', 'questionnaire', 'status'] as const;
export type FilterParameter = (typeof FILTER_PARAMETERS)[number];

/** Statuses of a QuestionnaireResponse version that trigger the report topic. */
export const REPORT_STATUSES = ['completed', 'amended', 'entered-in-error'] as const;

/** One published topic: its id, canonical URL, resource and the filters it can apply. */
export interface TopicDefinition {
  readonly id: string;
  readonly url: string;
  readonly title: string;
  readonly description: string;
  readonly resource: 'QuestionnaireResponse' | 'Task';
  readonly canFilterBy: readonly FilterParameter[];
  readonly statuses?: readonly string[];
}

export const TOPICS: readonly TopicDefinition[] = [
  {
    id: 'report-status',
    url: REPORT_TOPIC_URL,
    title: 'Report reached completed, amended or entered-in-error',
    description:
      'A QuestionnaireResponse (a report) was stored with status completed, amended or entered-in-error: submitted, corrected after submission, or retracted. Every stored version in one of these statuses is one notification.',
    resource: 'QuestionnaireResponse',
    canFilterBy: ['patient', 'encounter', 'questionnaire', 'status'],
    statuses: REPORT_STATUSES,
  },
  {
    id: 'task-status',
    url: TASK_TOPIC_URL,
    title: 'Task changed status',
    description: 'A Task moved from one status to another (TaskStatusChanged).',
    resource: 'Task',
    canFilterBy: ['patient', 'encounter', 'status'],
  },
];

/** The topic with canonical `url` (a `|version` suffix is ignored), or undefined. */
export const topicByUrl = (url: string): TopicDefinition | undefined => {
  const bare = url.split('|')[0];
  return TOPICS.find((t) => t.url === bare);
};

/** The facts of a triggering resource version that filters look at, and its focus. */
export interface TriggerFacts {
  readonly resourceType: 'QuestionnaireResponse' | 'Task';
  readonly id: number;
  /** The version the event stored (its stream revision + 1). */
  readonly version: number;
  readonly patient?: string | undefined;
  readonly encounter?: string | undefined;
  readonly questionnaire?: string | undefined;
  readonly status?: string | undefined;
}

const referenceText = (value: unknown): string | undefined => {
  const reference = (value as { reference?: unknown } | undefined)?.reference;
  return typeof reference === 'string' ? reference : undefined;
};

/** The reference patterns of the filter types (fixed, linear: no client text in a pattern). */
const REFERENCE_PATTERNS = {
  Patient: /(?:^|\/)Patient\/([^/]+)(?:\/_history\/[^/]+)?$/,
  Encounter: /(?:^|\/)Encounter\/([^/]+)(?:\/_history\/[^/]+)?$/,
} as const;

/** `…/Patient/12`, `Patient/12/_history/3` or `12` → `Patient/12`; other text unchanged. */
export const normaliseReference = (type: keyof typeof REFERENCE_PATTERNS, value: string): string => {
  const match = REFERENCE_PATTERNS[type].exec(value);
  if (match) return `${type}/${match[1]}`;
  return /^[A-Za-z0-9\-.]{1,64}$/.test(value) ? `${type}/${value}` : value;
};

/**
 * The facts of a stored resource version for the topics (docs/interface.md "Subscriptions").
 * @param content the stored content of the version.
 */
export const triggerFacts = (
  resourceType: 'QuestionnaireResponse' | 'Task',
  id: number,
  version: number,
  content: Content,
): TriggerFacts => {
  const subject = referenceText(resourceType === 'Task' ? content.for : content.subject);
  const encounter = referenceText(content.encounter);
  return {
    resourceType,
    id,
    version,
    patient: subject ? normaliseReference('Patient', subject) : undefined,
    encounter: encounter ? normaliseReference('Encounter', encounter) : undefined,
    questionnaire: typeof content.questionnaire === 'string' ? content.questionnaire : undefined,
    status: typeof content.status === 'string' ? content.status : undefined,
  };
};

/**
 * The topics a stored event triggers (docs/interface.md "Subscriptions"): the report topic on every
 * QuestionnaireResponse version stored (created, updated or submitted) whose status is completed,
 * amended or entered-in-error; the Task topic on TaskStatusChanged.
 * @param kind the resource event's kind (`resourceEventKind`).
 */
export const triggeredTopics = (
  resourceType: string,
  kind: 'created' | 'updated' | 'deleted' | 'statusChanged',
  content: Content | undefined,
): TopicDefinition[] => {
  if (!content) return [];
  if (resourceType === 'QuestionnaireResponse' && kind !== 'deleted')
    return (REPORT_STATUSES as readonly unknown[]).includes(content.status) ? [TOPICS[0]!] : [];
  if (resourceType === 'Task' && kind === 'statusChanged') return [TOPICS[1]!];
  return [];
};

/** One `filterBy` of a Subscription, normalised (references as `Type/id`). */
export interface SubscriptionFilter {
  readonly filterParameter: FilterParameter;
  readonly value: string;
}

/**
 * Does a triggering version pass every filter (FHIR R5: all filterBy entries must match; the values
 * of one entry are comma-separated alternatives)?
 */
export const passesFilters = (facts: TriggerFacts, filters: readonly SubscriptionFilter[]): boolean =>
  filters.every((f) => {
    const actual = facts[f.filterParameter];
    if (actual === undefined) return false;
    const alternatives = f.value.split(',').map((v) => v.trim());
    if (f.filterParameter === 'patient')
      return alternatives.some((v) => normaliseReference('Patient', v) === actual);
    if (f.filterParameter === 'encounter')
      return alternatives.some((v) => normaliseReference('Encounter', v) === actual);
    if (f.filterParameter === 'questionnaire')
      return alternatives.some((v) => v === actual || v === actual.split('|')[0]);
    return alternatives.includes(actual);
  });
