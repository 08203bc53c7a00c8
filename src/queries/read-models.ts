/**
 * What the layers above read of the read models themselves (docs/architecture.md "Layers",
 * "Projections"): the error a read throws when its read model is stopped or behind, and the
 * notice that read models applied new events (to wake a reader such as the exporter).
 */
import { exportOutboxProjection } from '../projections/export-outbox.js';
import type { ProjectionRunner } from '../projections/runner/index.js';

export { exportKeysOf } from '../projections/export-outbox.js';
export { ReadModelUnavailable } from '../projections/runner/index.js';

/**
 * The runner's notices of applied events: `applied$` emits the names of the read models that
 * applied new events (undefined: possibly all of them).
 */
export type ReadModelNotices = Pick<ProjectionRunner, 'applied$'>;

/** The name of the export outbox read model (`rm_export_outbox`), as `applied$` reports it. */
export const EXPORT_OUTBOX = exportOutboxProjection.name;
