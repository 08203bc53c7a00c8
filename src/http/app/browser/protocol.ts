/**
 * The messages between the editor page and the form engine's Web Worker (issue 32).
 */
import type { EditorData } from '../editor-form.js';

/** One field of the page: its name and value (checked boxes only; disabled fields too). */
export type Field = readonly [name: string, value: string];

/** A problem the page shows at a field: its node key, the rule's issue code, the message. */
export type FieldProblem = readonly [key: string, code: string, message: string];

/** Page → worker. */
export type ToWorker =
  | {
      readonly type: 'init';
      readonly data: EditorData;
      /** Evaluations (FHIRPath expressions, regexes) that overran in an earlier worker. */
      readonly refused: readonly string[];
    }
  | { readonly type: 'run'; readonly seq: number; readonly fields: readonly Field[] };

/** What one run of the engine gives the page. */
export interface EngineResult {
  /** Enablement by node key. */
  readonly enabled: readonly (readonly [string, boolean])[];
  /** Calculated values by node key, as text (units included). */
  readonly calculated: readonly (readonly [string, string])[];
  /** Field problems: values a field cannot hold, then the checks' errors. */
  readonly problems: readonly FieldProblem[];
}

/** Worker → page. */
export type FromWorker =
  /** An evaluation starts (its label) or ended (undefined): the page's watchdog listens. */
  | { readonly type: 'evaluating'; readonly label: string | undefined }
  | ({ readonly type: 'result'; readonly seq: number } & EngineResult)
  | { readonly type: 'failed'; readonly seq: number; readonly message: string };
