/**
 * The one generic command handler (CONVENTIONS.md "Application"): read the stream, fold it with
 * `evolve`, `decide`, append with the revision read as the expected state; on a version conflict
 * reload and decide again, a few times.
 */
import { type Decider, type Event, fold } from '../domain/decider.js';
import {
  type AppendRequest,
  type ExpectedState,
  type Position,
  WrongExpectedVersion,
} from '../eventstore/port.js';
import { type CommandContext, toNewEvents } from './context.js';

/** How many times a command is re-decided after a concurrent append to its stream. */
export const MAX_ATTEMPTS = 5;

export interface Loaded<State> {
  readonly state: State;
  /** Revision of the stream's last event, or 'no_stream'. */
  readonly expected: ExpectedState;
}

/** Reads a stream and folds it. */
export const load = async <State, E extends Event>(
  ctx: CommandContext,
  streamName: string,
  decider: Decider<never, State, E>,
): Promise<Loaded<State>> => {
  const recorded = await ctx.store.readStream(streamName);
  const events = recorded.map((r) => ({ type: r.type, data: r.data }) as E);
  const last = recorded.at(-1);
  return {
    state: fold(decider as Decider<unknown, State, E>, events),
    expected: last ? last.revision : 'no_stream',
  };
};

export interface Handled<State, E extends Event> {
  /** State after the new events. */
  readonly state: State;
  readonly events: E[];
  /** `$all` position of the last appended event; undefined when nothing was appended. */
  readonly position: Position | undefined;
}

/**
 * Runs `command(state)` against a stream. `command` may inspect the state and return a command, or
 * throw a DomainError (refusal). When `expectedRevision` is given (FHIR If-Match), the stream must
 * be at it and no retry happens.
 * @throws {DomainError} refused; @throws {WrongExpectedVersion} still conflicting after MAX_ATTEMPTS,
 *   or at once when `expectedRevision` does not match.
 */
export const handle = async <Command, State, E extends Event>(
  ctx: CommandContext,
  streamName: string,
  decider: Decider<Command, State, E>,
  command: Command | ((state: State) => Command),
  options: { expectedRevision?: bigint; waitForProjections?: boolean } = {},
): Promise<Handled<State, E>> => {
  for (let attempt = 1; ; attempt++) {
    const { state, expected } = await load(ctx, streamName, decider as Decider<never, State, E>);
    if (options.expectedRevision !== undefined && expected !== options.expectedRevision)
      throw new WrongExpectedVersion(
        streamName,
        options.expectedRevision,
        expected === 'no_stream' ? 'no_stream' : (expected as bigint),
      );
    const resolved = typeof command === 'function' ? (command as (s: State) => Command)(state) : command;
    const events = decider.decide(resolved, state);
    if (events.length === 0) return { state, events, position: undefined };
    try {
      const result = await ctx.store.append(streamName, toNewEvents(ctx, events), expected);
      if (options.waitForProjections !== false) await ctx.waitForProjections(result.position);
      return { state: events.reduce(decider.evolve, state), events, position: result.position };
    } catch (error) {
      if (
        error instanceof WrongExpectedVersion &&
        options.expectedRevision === undefined &&
        attempt < MAX_ATTEMPTS
      )
        continue;
      throw error;
    }
  }
};

/**
 * Appends several streams' decisions atomically (a resource stream plus its identifier
 * reservations) and waits for the projections.
 * @throws {WrongExpectedVersion} when any stream moved; nothing was written.
 */
export const appendAtomically = async (
  ctx: CommandContext,
  parts: readonly { streamName: string; expectedState: ExpectedState; events: readonly Event[] }[],
): Promise<Position> => {
  const requests: AppendRequest[] = parts.map((p) => ({
    streamName: p.streamName,
    expectedState: p.expectedState,
    events: toNewEvents(ctx, p.events),
  }));
  const result = await ctx.store.appendMany(requests);
  await ctx.waitForProjections(result.position);
  return result.position;
};
