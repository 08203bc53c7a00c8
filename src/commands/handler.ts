/**
 * The one command handler (docs/architecture.md "The write pipeline"). Every write of casebook runs
 * through {@link execute}: a command function reads the streams it needs through a
 * {@link UnitOfWork}, runs the pure deciders on their states, and the handler appends every
 * decided event in ONE atomic `appendMany`, each stream expected at the revision it was read at.
 * When another writer moved one of those streams first (`WrongExpectedVersion`), the whole
 * command runs again on fresh state, after a bounded, jittered backoff.
 */
import { v5 as uuidv5 } from 'uuid';
import { AUDIT_EVENTS_RECORDED, type AuditRecord, auditStream } from '../domain/audit/audit.js';
import { type Decider, DomainError, type Event } from '../domain/decider.js';
import { newId } from '../domain/ids.js';
import {
  type Actor,
  type AppendOptions,
  type AppendRequest,
  type ExpectedState,
  type NewEvent,
  type Position,
  WrongExpectedVersion,
} from '../eventstore/port.js';
import { SubjectErased } from '../eventstore/shredding/codec.js';
import { type CommandContext, toNewEvents } from './context.js';

/** How many times a command is decided at most (the first try and its retries). */
export const MAX_ATTEMPTS = 12;
/** Backoff before retry n: a random delay in [0, min(BACKOFF_CAP_MS, BACKOFF_BASE_MS · 2^n)) ms. */
const BACKOFF_BASE_MS = 2;
const BACKOFF_CAP_MS = 200;
/** Namespace of the event ids derived from a command id (idempotent commands). */
const COMMAND_NAMESPACE = '9b2f4c1e-7d3a-4e5b-8c6d-1a2b3c4d5e6f';

/** A decider of any stream: the unit of work keeps each stream's own decider with its state. */
// biome-ignore lint/suspicious/noExplicitAny: streams of different aggregates share one map
export type AnyDecider = Decider<any, any, any>;

interface StreamSlot {
  readonly decider: AnyDecider;
  state: unknown;
  /** Revision the stream was read at: the expected state of the append. */
  expected: ExpectedState;
  readonly events: Event[];
  /** Checked by the append even without events. */
  required: boolean;
  /** When its first event was decided: streams are appended in the order of decision. */
  order: number;
  /** Read from the store (false: declared fresh, assumed empty). */
  readonly loaded: boolean;
  /** Metadata overrides of this stream's events. */
  cause?: { readonly tenantId?: number | null; readonly actor?: Actor };
}

export interface DecideOptions {
  /**
   * The stream is new (a freshly allocated id, or a reservation expected to be free) and is not
   * read; if it turns out to exist, the append conflicts and the retry reads it.
   */
  readonly fresh?: boolean;
  /** The tenant (and actor) of this stream's events, when it differs from the command's. */
  readonly cause?: { readonly tenantId?: number | null; readonly actor?: Actor };
}

/** The streams one attempt of a command reads and writes. */
export interface UnitOfWork {
  readonly ctx: CommandContext;
  /** The command's time, ISO-8601 (deciders get it on their commands). */
  readonly now: string;
  /**
   * The state of `stream` folded with `decider`, including events this unit of work decided on it.
   * Read once per attempt; an append to it expects the revision read.
   */
  load<S, E extends Event>(stream: string, decider: Decider<never, S, E>): Promise<S>;
  /** Loads several streams in one read (same rules as {@link load}). */
  loadAll(streams: readonly (readonly [string, AnyDecider])[]): Promise<void>;
  /** The revision `stream` was read at ('no_stream' when empty); undefined when not loaded. */
  revision(stream: string): ExpectedState | undefined;
  /**
   * Runs `decider.decide(command, state)` on the stream's current state and keeps the events for
   * the append. `fresh`: the stream is new (a freshly allocated id, or a reservation expected to
   * be free) and is not read; if it turns out to exist, the append conflicts and the retry reads it.
   * @throws {DomainError} the decider's refusal.
   */
  decide<C, S, E extends Event>(
    stream: string,
    decider: Decider<C, S, E>,
    command: C | ((state: S) => C),
    options?: DecideOptions,
  ): Promise<E[]>;
  /**
   * The number of events `stream` holds with this unit of work's decisions (a FHIR resource's
   * `versionId`); 0 for an empty stream. The stream must have been loaded or decided on.
   */
  version(stream: string): number;
  /**
   * Makes the append check that a loaded stream this command depends on, but does not write, is
   * still at the revision read (e.g. the Patient a new Task references).
   */
  require(stream: string): void;
  /** Every event decided so far, per stream. */
  pending(): ReadonlyMap<string, readonly Event[]>;
  /**
   * Sets the tenant and actor recorded in the metadata of this command's events, when the command
   * learns them from what it reads (a handover acts as the session it activates).
   */
  setCause(cause: { tenantId?: number | null; actor?: Actor }): void;
}

class Work implements UnitOfWork {
  readonly now: string;
  private readonly slots = new Map<string, StreamSlot>();
  private cause: { tenantId?: number | null; actor?: Actor } = {};
  private decisions = 0;

  constructor(
    readonly ctx: CommandContext,
    /** Streams that conflicted in an earlier attempt: read even when declared fresh. */
    private readonly contested: ReadonlySet<string>,
  ) {
    this.now = ctx.now.toISOString();
  }

  private slotFrom(
    decider: AnyDecider,
    events: readonly { type: string; data: unknown; revision: bigint; streamName?: string; erased?: true }[],
  ): StreamSlot {
    // A stream about an erased patient has no state left to decide on (docs/architecture.md "Erasure").
    const erased = events.find((e) => e.erased);
    if (erased) throw erasedStream(erased.streamName ?? 'the stream');
    const state = events.reduce(
      (s, e) => decider.evolve(s, { type: e.type, data: e.data }),
      decider.initialState,
    );
    const last = events.at(-1);
    return {
      decider,
      state,
      expected: last ? last.revision : 'no_stream',
      events: [],
      required: false,
      order: Number.POSITIVE_INFINITY,
      loaded: true,
    };
  }

  async load<S, E extends Event>(stream: string, decider: Decider<never, S, E>): Promise<S> {
    let slot = this.slots.get(stream);
    if (!slot) {
      slot = this.slotFrom(decider as AnyDecider, await this.ctx.store.readStream(stream));
      this.slots.set(stream, slot);
    }
    return slot.state as S;
  }

  async loadAll(streams: readonly (readonly [string, AnyDecider])[]): Promise<void> {
    const missing = streams.filter(([name]) => !this.slots.has(name));
    if (missing.length === 0) return;
    const read = await this.ctx.store.readStreams(missing.map(([name]) => name));
    for (const [name, decider] of missing)
      if (!this.slots.has(name)) this.slots.set(name, this.slotFrom(decider, read.get(name) ?? []));
  }

  revision(stream: string): ExpectedState | undefined {
    return this.slots.get(stream)?.expected;
  }

  async decide<C, S, E extends Event>(
    stream: string,
    decider: Decider<C, S, E>,
    command: C | ((state: S) => C),
    options: DecideOptions = {},
  ): Promise<E[]> {
    let slot = this.slots.get(stream);
    if (!slot) {
      if (options.fresh && !this.contested.has(stream)) {
        slot = {
          decider: decider as AnyDecider,
          state: decider.initialState,
          expected: 'no_stream',
          events: [],
          required: false,
          order: Number.POSITIVE_INFINITY,
          loaded: false,
        };
        this.slots.set(stream, slot);
      } else {
        await this.load(stream, decider as Decider<never, S, E>);
        slot = this.slots.get(stream)!;
      }
    }
    if (options.cause) slot.cause = options.cause;
    const state = slot.state as S;
    const resolved = typeof command === 'function' ? (command as (s: S) => C)(state) : command;
    const events = decider.decide(resolved, state);
    if (events.length > 0 && slot.events.length === 0) slot.order = this.decisions++;
    slot.events.push(...events);
    slot.state = events.reduce(decider.evolve, state);
    return events;
  }

  version(stream: string): number {
    const slot = this.slots.get(stream);
    if (!slot) throw new Error(`version of ${stream}: the stream was not loaded`);
    return (slot.expected === 'no_stream' ? 0 : Number(slot.expected) + 1) + slot.events.length;
  }

  require(stream: string): void {
    const slot = this.slots.get(stream);
    if (!slot) throw new Error(`require ${stream}: the stream was not loaded`);
    slot.required = true;
  }

  setCause(cause: { tenantId?: number | null; actor?: Actor }): void {
    this.cause = { ...this.cause, ...cause };
  }

  /**
   * Whether a stream this attempt read has moved since (another writer appended to it). A refusal
   * decided on such reads may rest on an inconsistent view, e.g. an Encounter already visible
   * but not the Patient that the same append created, read a moment earlier.
   */
  async readsMoved(): Promise<boolean> {
    const read = [...this.slots].filter(([, slot]) => slot.loaded);
    const moved = await Promise.all(
      read.map(async ([name, slot]) => {
        const fromRevision = slot.expected === 'no_stream' ? 0n : BigInt(slot.expected as bigint) + 1n;
        return (await this.ctx.store.readStream(name, { fromRevision, maxCount: 1 })).length > 0;
      }),
    );
    return moved.some(Boolean);
  }

  pending(): ReadonlyMap<string, readonly Event[]> {
    return new Map(
      [...this.slots].filter(([, s]) => s.events.length > 0).map(([name, s]) => [name, s.events]),
    );
  }

  /** The append of this attempt: every stream with decided events, expected at its read revision. */
  requests(commandId: string | undefined): AppendRequest[] {
    let index = 0;
    return [...this.slots]
      .filter(([, slot]) => slot.events.length > 0 || slot.required)
      .sort(([, a], [, b]) => a.order - b.order)
      .map(([streamName, slot]) => {
        const ctx = { ...this.ctx, ...this.cause, ...slot.cause };
        const events = toNewEvents(ctx, slot.events).map((event): NewEvent => {
          const id = commandId ? uuidv5(`${commandId}:${index}`, COMMAND_NAMESPACE) : event.id;
          index++;
          return { ...event, id };
        });
        return { streamName, expectedState: slot.expected, events };
      });
  }
}

/** What a command produced. */
export interface Executed<R> {
  readonly result: R;
  /** `$all` position of the append; undefined when the command decided nothing. */
  readonly position: Position | undefined;
  /** The events appended (with their ids and metadata), without the AuditEvent of `options.audit`. */
  readonly events: readonly NewEvent[];
  /** The AuditEvent appended with the command's events (`options.audit`); undefined when none was. */
  readonly audited?: AuditRecord;
}

export interface ExecuteOptions<R = unknown> {
  /**
   * A stable id of this command (for instance derived from an outside key): event ids are derived
   * from it, so executing the same command again after it was stored writes nothing twice.
   */
  readonly commandId?: string;
  /** Override {@link MAX_ATTEMPTS} (tests). */
  readonly maxAttempts?: number;
  /** How the append is announced (the port's {@link AppendOptions}). */
  readonly append?: AppendOptions;
  /**
   * The AuditEvent of the request this command serves, built from the command's result: it is
   * appended in the command's own append (docs/architecture.md "Audit trail"), so the write and
   * its record commit together and the request waits for no second append. Not called when the
   * command decides nothing (nothing is appended: the caller records the request as usual).
   */
  readonly audit?: (result: R) => AuditRecord | undefined;
}

const backoff = (attempt: number): Promise<void> => {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt);
  return new Promise((resolve) => setTimeout(resolve, Math.random() * ceiling));
};

/**
 * Runs `command` until its decisions append without conflict: at most `maxAttempts` times, with a
 * jittered exponential backoff between attempts. A refusal ({@link DomainError}) is final only
 * when the streams it was decided on are still at the revisions read; otherwise the command is
 * decided again on fresh state (a refusal never rests on a view that a concurrent append tore).
 * Nothing is written when it throws.
 * @returns the command's result, the append's position and the events written.
 * @throws {DomainError} a decider refused; {@link WrongExpectedVersion} still conflicting after
 *   the last attempt; {@link ReadModelUnavailable} (projections) a read model this write needs is stopped.
 */
export const execute = async <R>(
  ctx: CommandContext,
  command: (uow: UnitOfWork) => Promise<R>,
  options: ExecuteOptions<R> = {},
): Promise<Executed<R>> => {
  const maxAttempts = options.maxAttempts ?? MAX_ATTEMPTS;
  const contested = new Set<string>();
  // The tenant's identifier secret, for the names of its reservation streams (sync from here on).
  await ctx.identifiers?.prepare(ctx.tenantId);
  for (let attempt = 1; ; attempt++) {
    const work = new Work(ctx, contested);
    let result: R;
    try {
      result = await command(work);
    } catch (error) {
      // A refusal counts only if what it was decided on is still current: otherwise decide again.
      if (!(error instanceof DomainError) || attempt >= maxAttempts || !(await work.readsMoved()))
        throw error;
      ctx.onConflict?.();
      await backoff(attempt);
      continue;
    }
    const requests = work.requests(options.commandId);
    if (!requests.some((r) => r.events.length > 0)) return { result, position: undefined, events: [] };
    const audited = options.audit?.(result);
    try {
      const appended = await ctx.store.appendMany(
        audited ? [...requests, auditRequest(ctx, audited)] : requests,
        options.append,
      );
      const events = requests.flatMap((r) => r.events);
      await ctx.afterAppend(appended.position, events);
      return { result, position: appended.position, events, ...(audited ? { audited } : {}) };
    } catch (error) {
      if (error instanceof SubjectErased)
        throw new DomainError(
          'gone',
          'PatientErased',
          `${error.subject} was erased: nothing more is recorded about it`,
          undefined,
          {
            issueCode: 'deleted',
          },
        );
      if (!(error instanceof WrongExpectedVersion) || attempt >= maxAttempts) throw error;
      ctx.onConflict?.();
      contested.add(error.streamName);
      await backoff(attempt);
    }
  }
};

/** The refusal of a command on a stream whose patient was erased (410 Gone). */
const erasedStream = (streamName: string): DomainError =>
  new DomainError(
    'gone',
    'PatientErased',
    `${streamName.replace('-', '/')} was erased with its patient`,
    undefined,
    {
      issueCode: 'deleted',
    },
  );

/** The append of one AuditEvent next to a command's events: a batch of one, in its own stream. */
const auditRequest = (ctx: CommandContext, record: AuditRecord): AppendRequest => ({
  streamName: auditStream(newId()),
  expectedState: 'no_stream',
  events: toNewEvents(ctx, [{ type: AUDIT_EVENTS_RECORDED, data: { records: [record] } }], record.tenantId),
});

/** A refusal for an If-Match that names another version than the stream's (412). */
export const versionMismatch = (what: string, ifMatch: number, current: number): DomainError =>
  new DomainError(
    'precondition_failed',
    'VersionMismatch',
    `If-Match names version ${ifMatch} but ${what} is at version ${current}`,
    undefined,
    { issueCode: 'conflict' },
  );
