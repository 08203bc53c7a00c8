/**
 * Child processes for the benches: start a server, wait until it answers, read its CPU time and
 * resident set from /proc, stop it. casebook runs compiled, as `npm start` runs it
 * (`node dist/cli/main.js`); the raw baseline as `node --import tsx <script>` (not the `tsx`
 * binary, which forks a second node process). Either way the pid measured is the server's own.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
// The repository root and a free port: the same helpers as the tests' (the benches run from the root).
import { freePort, ROOT } from '../../test/support/process.js';

export { freePort, ROOT };

/** Clock ticks per second of /proc/<pid>/stat times (usually 100). */
const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/** A started child process with its output kept for error messages. */
export interface Child {
  readonly process: ChildProcess;
  readonly pid: number;
  /** The last 64 KiB of stdout and stderr together. */
  output(): string;
  /** Sends SIGTERM, waits up to 10 s for the exit, then SIGKILL. */
  stop(): Promise<void>;
}

/**
 * Spawns `node [nodeArgs] --import tsx <script> [args]` in the repository root with `env` added to
 * this process's environment.
 */
export const spawnTs = (
  script: string,
  args: readonly string[],
  env: Record<string, string>,
  nodeArgs: readonly string[] = [],
): Child => spawnNode([...nodeArgs, '--import', 'tsx', script, ...args], env, script);

let built = false;

/** Compiles casebook into dist/ (`npm run build`), once per bench process. */
export const buildCasebook = (): void => {
  if (built) return;
  execFileSync('npm', ['run', 'build', '--silent'], { cwd: ROOT, stdio: 'inherit' });
  built = true;
};

/**
 * The key-encryption key of the benches' casebook processes, unless CASEBOOK_KEK is set: fixed, so
 * that a schema kept by one run (BENCH_KEEP) is read by the next (docs/architecture.md "Erasure").
 * A bench key, never a real one.
 */
const BENCH_KEK = process.env.CASEBOOK_KEK ?? '6u1Jn/FtOsUfMqYDsRFFu4C+U/OP8xw9NMFHJQqT/cM=';

/**
 * Spawns the compiled casebook CLI, `node [nodeArgs] dist/cli/main.js [args]`, as `npm start` runs
 * the server; compiles it first ({@link buildCasebook}).
 */
export const spawnCasebook = (
  args: readonly string[],
  env: Record<string, string>,
  nodeArgs: readonly string[] = [],
): Child => {
  buildCasebook();
  return spawnNode(
    [...nodeArgs, 'dist/cli/main.js', ...args],
    { CASEBOOK_KEK: BENCH_KEK, ...env },
    'dist/cli/main.js',
  );
};

/** Spawns `node <argv>` in the repository root with `env` added to this process's environment. */
const spawnNode = (argv: readonly string[], env: Record<string, string>, script: string): Child => {
  const child = spawn(process.execPath, argv, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-65_536);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  if (child.pid === undefined) throw new Error(`could not spawn ${script}`);
  const pid = child.pid;
  return {
    process: child,
    pid,
    output: () => output,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
};

/**
 * Polls `url` every 50 ms until it answers 200; returns the milliseconds since `since`
 * (performance.now() clock).
 * @throws {Error} when the child exits first or `timeoutMs` passes, with its output.
 */
export const waitFor200 = async (
  url: string,
  child: Child,
  since: number,
  timeoutMs = 120_000,
): Promise<number> => {
  for (;;) {
    if (child.process.exitCode !== null)
      throw new Error(`server exited with ${child.process.exitCode}:\n${child.output()}`);
    try {
      const response = await fetch(url);
      await response.arrayBuffer();
      if (response.status === 200) return performance.now() - since;
    } catch {
      // not listening yet
    }
    if (performance.now() - since > timeoutMs)
      throw new Error(`${url} did not answer 200 within ${timeoutMs} ms:\n${child.output()}`);
    await sleep(50);
  }
};

/** CPU time (user + system) the process has used so far, in ms, from /proc/<pid>/stat. */
export const cpuMs = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
  return (ticks * 1000) / CLOCK_TICKS;
};

/**
 * The whole machine's CPU time so far, from the first line of /proc/stat: `busyMs` (every state
 * but idle and iowait, summed over all cores) and `idleMs`, milliseconds.
 */
export const machineCpuMs = (): { busyMs: number; idleMs: number } => {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  const total = fields.slice(0, 8).reduce((sum, n) => sum + n, 0);
  return { busyMs: ((total - idle) * 1000) / CLOCK_TICKS, idleMs: (idle * 1000) / CLOCK_TICKS };
};

/**
 * Waits until the process is idle: its CPU use stays under `threshold` (a fraction of one core) for
 * two polls of `pollMs` in a row, so that a measured run does not pay for work an earlier one left
 * behind (sealing, the AuditEvent view). Gives up silently after `timeoutMs`.
 * @returns milliseconds waited.
 */
export const waitIdle = async (
  pid: number,
  { threshold = 0.03, pollMs = 250, timeoutMs = 60_000 } = {},
): Promise<number> => {
  const since = performance.now();
  let quiet = 0;
  let before = cpuMs(pid);
  while (quiet < 2 && performance.now() - since < timeoutMs) {
    await sleep(pollMs);
    const now = cpuMs(pid);
    quiet = now - before < threshold * pollMs ? quiet + 1 : 0;
    before = now;
  }
  return performance.now() - since;
};

/** Resident set of the process now and its peak (VmHWM), in MiB, from /proc/<pid>/status. */
export const rssMiB = (pid: number): { now: number; peak: number } => {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
  return { now: kib('VmRSS') / 1024, peak: kib('VmHWM') / 1024 };
};

/**
 * Waits until the child has printed `text` (stdout or stderr).
 * @throws {Error} when the child exits first or `timeoutMs` passes, with its output.
 */
export const waitForOutput = async (child: Child, text: string, timeoutMs = 60_000): Promise<void> => {
  const since = performance.now();
  while (!child.output().includes(text)) {
    if (child.process.exitCode !== null)
      throw new Error(`process exited with ${child.process.exitCode}:\n${child.output()}`);
    if (performance.now() - since > timeoutMs)
      throw new Error(`no "${text}" within ${timeoutMs} ms:\n${child.output()}`);
    await sleep(50);
  }
};
