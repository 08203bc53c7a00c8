/**
 * Given/when/then for the pure deciders (CONVENTIONS.md "Tests"):
 *
 *   given(sessionDecider, [sessionCreated]).when(handOver(token, now)).then([sessionHandedOver]);
 *   given(sessionDecider, [sessionCreated, sessionHandedOver]).when(handOver(token, now)).thenThrows('HandoverTokenInvalid');
 *   given(sessionDecider, [sessionCreated]).thenState({ status: 'inactive', ... });
 *
 * `given` folds the events with the decider's `evolve`; `then` asserts the decided events with deep
 * equality; `thenThrows` asserts that `decide` refuses with a DomainError of that code (and kind).
 */
import { expect } from 'chai';
import { type Decider, DomainError, type DomainErrorKind, type Event } from '../../src/domain/decider.js';

export interface When<E extends Event> {
  /** Asserts that the command decides exactly `expected` (deep equality, order included). */
  then(expected: readonly E[]): void;
  /**
   * Asserts that the command is refused with a DomainError whose `code` is `code` (and whose
   * `kind` is `kind`, when given). Returns the error for further assertions.
   */
  thenThrows(code: string, kind?: DomainErrorKind): DomainError;
}

export interface Given<Command, State, E extends Event> {
  /** The state folded from the given events. */
  readonly state: State;
  when(command: Command): When<E>;
  /** Asserts the folded state (deep equality). */
  thenState(expected: State): void;
}

export const given = <Command, State, E extends Event>(
  decider: Decider<Command, State, E>,
  events: readonly E[] = [],
): Given<Command, State, E> => {
  const state = events.reduce(decider.evolve, decider.initialState);
  return {
    state,
    thenState: (expected) => expect(state).to.deep.equal(expected),
    when: (command) => ({
      // `then` is the point of given/when/then (CONVENTIONS.md "Tests"). Awaiting it by mistake cannot
      // pass silently: `then(resolve)` compares the decided events with a function and rejects.
      // biome-ignore lint/suspicious/noThenProperty: given/when/then reads as the conventions ask
      then: (expected) => expect(decider.decide(command, state)).to.deep.equal(expected),
      thenThrows: (code, kind) => {
        let decided: E[];
        try {
          decided = decider.decide(command, state);
        } catch (error) {
          expect(error).to.be.instanceOf(DomainError);
          const refusal = error as DomainError;
          expect(refusal.code, 'DomainError code').to.equal(code);
          if (kind !== undefined) expect(refusal.kind, 'DomainError kind').to.equal(kind);
          return refusal;
        }
        expect.fail(`expected ${code}, but the command decided ${JSON.stringify(decided)}`);
      },
    }),
  };
};
