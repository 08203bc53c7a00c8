/**
 * A hospital launch (docs/interface.md §4.6; issue 12): the fact that a launch link was accepted,
 * what it opened, and whether its demographics disagreed with the Patient on record. Stream
 * `launch-<sha256 of the nonce>`: appended with the launch's other events, expected `no_stream`,
 * so a nonce is used once even under concurrent requests (the loser's retry finds it taken).
 * No patient data beyond casebook ids: which demographic elements disagreed, never their values.
 */
import { createHash } from 'node:crypto';
import { type Decider, DomainError, type Event } from '../decider.js';

export interface LaunchAcceptedData {
  /** How the link was trusted: signed with configured secret number `key` (0-based), or unsigned. */
  readonly signed: boolean;
  readonly key?: number;
  /** The link's time stamp (Unix seconds), when signed. */
  readonly ts?: number;
  readonly patientId: number;
  readonly encounterId: number;
  readonly taskId: number;
  readonly taskCreated: boolean;
  readonly sessionId: number;
  readonly userId: number;
  /** Patient elements (`birthDate`, `gender`) the link gave differently from the record. */
  readonly disagreements: readonly string[];
  /** Whether those were written (LAUNCHER_UPDATE_DEMOGRAPHICS) or the record kept. */
  readonly demographicsUpdated: boolean;
  readonly at: string;
}

export type LaunchEvent = Event<'LaunchAccepted', LaunchAcceptedData>;

export type LaunchState = { readonly status: 'none' } | { readonly status: 'accepted' };

export type LaunchCommand = { readonly type: 'AcceptLaunch' } & Omit<LaunchAcceptedData, 'at'> & {
    readonly now: string;
  };

export const launchDecider: Decider<LaunchCommand, LaunchState, LaunchEvent> = {
  initialState: { status: 'none' },
  evolve: (_state, event) => {
    switch (event.type) {
      case 'LaunchAccepted':
        return { status: 'accepted' };
      default: {
        const _exhaustive: never = event.type;
        return _state;
      }
    }
  },
  decide: (command, state) => {
    if (state.status === 'accepted')
      throw new DomainError('unauthorized', 'LaunchReplayed', 'the launch link was already used');
    const { type: _type, now, ...data } = command;
    return [{ type: 'LaunchAccepted', data: { ...data, at: now } }];
  },
};

/** The stream of the launch with `nonce` (hashed: a nonce is a bearer secret until used). */
export const launchStream = (nonce: string): string =>
  `launch-${createHash('sha256').update(nonce).digest('hex').slice(0, 40)}`;
