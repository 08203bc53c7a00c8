/**
 * Shared shapes of the pure deciders (CONVENTIONS.md "Domain"): an aggregate is events, state,
 * `evolve`, commands and `decide`. Deciders never read the clock, generate ids or do I/O.
 */

/** A domain event: a past-tense fact. Event data holds ISO-8601 strings, never `Date`. */
export interface Event<Type extends string = string, Data = unknown> {
  readonly type: Type;
  readonly data: Data;
}

export interface Decider<Command, State, E extends Event> {
  readonly initialState: State;
  /** Folds one event into the state. Total: never throws. */
  readonly evolve: (state: State, event: E) => State;
  /**
   * Decides which events a command produces. Returns [] when the command changes nothing.
   * @throws {DomainError} when the command is refused; nothing is stored for it.
   */
  readonly decide: (command: Command, state: State) => E[];
}

/**
 * How a refused command maps to the interface. The HTTP edge turns each kind into a status:
 * invalid 400, unauthorized 401, forbidden 403, not_found 404, conflict 409, gone 410,
 * precondition_failed 412, unprocessable 422.
 */
export type DomainErrorKind =
  | 'invalid'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'gone'
  | 'precondition_failed'
  | 'unprocessable';

/** A refused command (CONVENTIONS.md: typed domain errors, never stored as events). */
export class DomainError extends Error {
  constructor(
    readonly kind: DomainErrorKind,
    /** A stable machine-readable name such as `HandoverTokenExpired`. */
    readonly code: string,
    message: string,
    /** Where in the request the problem is (a field path or FHIRPath), when known. */
    readonly expression?: string,
    /**
     * FHIR specifics: an OperationOutcome issue code other than the kind's default
     * (`duplicate`, `multiple-matches`, `required`, `business-rule`…), and the `Location` of an
     * existing resource (docs/interface.md §7: 409 duplicate points at the existing Patient).
     */
    readonly fhir: { readonly issueCode?: string; readonly location?: string } = {},
  ) {
    super(message);
    this.name = code;
  }
}

/** Folds a stream's events into its state. */
export const fold = <Command, State, E extends Event>(
  decider: Decider<Command, State, E>,
  events: readonly E[],
): State => events.reduce(decider.evolve, decider.initialState);
