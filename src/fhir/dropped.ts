/**
 * What a write did not store of what it was sent (issue 35 "nothing dropped in silence";
 * docs/interface.md §2.5, §4.3 rule 13): the elements of a request body that the stored content
 * lacks, named `<Type>.<element>` (`Patient.name.use`, `Patient.name` for a second name), and
 * the OperationOutcome a create answers with under `Prefer: return=OperationOutcome` and a
 * transaction entry carries as `response.outcome`. `resourceType`, `id` and `meta` are the
 * server's and never reported.
 */
import type { Content, ResourceType } from '../domain/fhir/resource.js';

const SERVER_ELEMENTS = new Set(['resourceType', 'id', 'meta']);

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Collects into `out` the paths of `sent` that `kept` lacks (array indexes left out of names). */
const walk = (sent: unknown, kept: unknown, path: string, out: Set<string>) => {
  if (Array.isArray(sent)) {
    const keptList = Array.isArray(kept) ? kept : [];
    sent.forEach((item, i) => {
      if (i >= keptList.length) out.add(path);
      else walk(item, keptList[i], path, out);
    });
    return;
  }
  if (!isObject(sent)) return;
  if (!isObject(kept)) {
    out.add(path);
    return;
  }
  for (const [key, value] of Object.entries(sent))
    if (!(key in kept)) out.add(`${path}.${key}`);
    else walk(value, kept[key], `${path}.${key}`, out);
};

/**
 * The elements of `body` (a request body of `type`) that `content` (what was stored) does not
 * hold, in the order met, each once.
 */
export const droppedElements = (type: ResourceType, body: unknown, content: Content): string[] => {
  if (!isObject(body)) return [];
  const out = new Set<string>();
  for (const [key, value] of Object.entries(body))
    if (SERVER_ELEMENTS.has(key)) continue;
    else if (!(key in content)) out.add(`${type}.${key}`);
    else walk(value, content[key], `${type}.${key}`, out);
  return [...out];
};

/** Why casebook does not store an element of `type` (docs/interface.md §2.5). */
const reasonOf = (type: ResourceType, element: string): string =>
  type === 'Patient' && element.startsWith('Patient.name')
    ? 'only the first name, and in it prefix, given, family and text, are stored (docs/interface.md §2.5)'
    : 'not stored by casebook (docs/interface.md §2.5)';

/**
 * The OperationOutcome of a write that stored `content` of `body`: one `warning` issue
 * (`informational`) per element not stored, or one `information` issue saying all was stored.
 */
export const writeOutcome = (type: ResourceType, body: unknown, content: Content) => {
  const dropped = droppedElements(type, body, content);
  return {
    resourceType: 'OperationOutcome',
    issue:
      dropped.length === 0
        ? [{ severity: 'information', code: 'informational', diagnostics: 'every element sent was stored' }]
        : dropped.map((element) => ({
            severity: 'warning',
            code: 'informational',
            diagnostics: `${element} was not stored: ${reasonOf(type, element)}`,
            expression: [element],
          })),
  };
};
