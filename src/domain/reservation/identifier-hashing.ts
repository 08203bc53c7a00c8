/**
 * How an installation names the reservation streams of identifiers (docs/architecture.md
 * "Erasure"): `hmac-sha256`, keyed by the tenant's identifier secret, chosen once by a store
 * created with it; `sha256` (unkeyed: an identifier space as small as an MRN's can be searched
 * against it) for a store that held events before the choice existed. One event in stream
 * `identifier-hashing`, decided at the first start on an empty log.
 */
import type { Decider, Event } from '../decider.js';

export const IDENTIFIER_HASHING_STREAM = 'identifier-hashing';
export const IDENTIFIER_HASHING_CHOSEN = 'IdentifierHashingChosen';

export type IdentifierHashingScheme = 'hmac-sha256' | 'sha256';

export type IdentifierHashingEvent = Event<
  typeof IDENTIFIER_HASHING_CHOSEN,
  { readonly scheme: IdentifierHashingScheme; readonly at: string }
>;

export type IdentifierHashingState = { readonly scheme: IdentifierHashingScheme | undefined };

export type IdentifierHashingCommand = {
  readonly type: 'ChooseIdentifierHashing';
  readonly scheme: IdentifierHashingScheme;
  readonly now: string;
};

/** The first choice stands: a later command (a racing second process) decides nothing. */
export const identifierHashingDecider: Decider<
  IdentifierHashingCommand,
  IdentifierHashingState,
  IdentifierHashingEvent
> = {
  initialState: { scheme: undefined },
  evolve: (state, event) => (state.scheme ? state : { scheme: event.data.scheme }),
  decide: (command, state) =>
    state.scheme
      ? []
      : [{ type: IDENTIFIER_HASHING_CHOSEN, data: { scheme: command.scheme, at: command.now } }],
};
