/** Runs casebook as a real process (npm start / the CLI), as a newcomer would. */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { PostgresSql } from '../../src/db/sql.js';
import { POSTGRES_TEST_URL } from './databases.js';

const execFileAsync = promisify(execFile);
export const ROOT = new URL('../../', import.meta.url).pathname;

/** A free TCP port on 127.0.0.1. */
export const freePort = async (): Promise<number> => {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  return port;
};

export interface RunningServer {
  readonly port: number;
  /** The command lines of the processes started (npm and the node it runs, or node alone). */
  readonly commandLines: () => string[];
  readonly output: () => string;
  /** SIGTERM: a graceful shutdown. */
  stop(): Promise<void>;
  /** SIGKILL: the process dies at once, as in a crash. */
  kill(): Promise<void>;
}

/**
 * Starts casebook's server and resolves once /healthz answers: `node --import tsx src/cli/main.ts
 * serve` (the source), or with `npmStart` the README's own command, `npm start` (which compiles
 * into dist/ and runs `node dist/cli/main.js serve`). The server runs in its own process group, so
 * `kill` ends npm and the server together.
 */
export const startServer = async (
  env: Record<string, string>,
  options: { npmStart?: boolean } = {},
): Promise<RunningServer> => {
  const port = await freePort();
  let output = '';
  const [command, args] = options.npmStart
    ? ['npm', ['start']]
    : [process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve']];
  const child: ChildProcess = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  child.stdout!.on('data', (d) => {
    output += d;
  });
  child.stderr!.on('data', (d) => {
    output += d;
  });
  // npm start compiles first (a few seconds, more on a loaded machine).
  const deadline = Date.now() + (options.npmStart ? 120_000 : 60_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited: ${output}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      process.kill(-child.pid!, 'SIGKILL');
      throw new Error(`server did not start: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const exited = once(child, 'exit');
  const signal = async (name: 'SIGTERM' | 'SIGKILL') => {
    if (name === 'SIGKILL') {
      // The whole group, even when npm has exited: nothing of the server may outlive a kill.
      try {
        process.kill(-child.pid!, name);
      } catch {
        // no process left in the group
      }
    }
    if (child.exitCode !== null || child.signalCode !== null) return;
    // SIGTERM to npm reaches the server (the start script execs node).
    if (name === 'SIGTERM') child.kill(name);
    await exited;
    // npm may exit before the server it started has finished shutting down: wait for the group.
    const deadline = Date.now() + 15_000;
    while (commandLines().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  };
  /** The command lines of the group's live processes (a zombie has exited: it is not listed). */
  const commandLines = (): string[] =>
    readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .flatMap((entry) => {
        try {
          const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
          const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
          // field 3 is the process group: the server's group is the child's pid (detached)
          if (Number(fields[2]) !== child.pid) return [];
          // field 1 is the state: Z (zombie) or X (dead) has exited and waits to be reaped; an
          // orphan's reaper is PID 1, which in a container may be slow to do it
          if (fields[0] === 'Z' || fields[0] === 'X') return [];
          return [readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim()];
        } catch {
          return []; // gone meanwhile
        }
      });
  return {
    port,
    commandLines,
    output: () => output,
    stop: () => signal('SIGTERM'),
    kill: () => signal('SIGKILL'),
  };
};

/** Runs the casebook CLI; resolves with stdout, rejects with stderr on a non-zero exit. */
export const cli = async (args: string[], env: Record<string, string>): Promise<string> => {
  const { stdout } = await execFileAsync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
  });
  return stdout;
};

/** Runs a shell script; resolves with its stdout. */
export const script = async (path: string, env: Record<string, string>): Promise<string> => {
  const { stdout } = await execFileAsync('bash', [path], { cwd: ROOT, env: { ...process.env, ...env } });
  return stdout;
};

/** A schema of the PostgreSQL test server for a real casebook process, seeded from a file. */
export interface ProcessSchema {
  readonly schema: string;
  /** DATABASE_URL on the schema and CASEBOOK_SEED: what `startServer` needs. */
  readonly env: Record<string, string>;
  /** A pool on the server (two connections), for the test's own reads and locks. */
  readonly admin: PostgresSql;
  /** Drops the schema (and the key store made beside it) and the seed's directory; closes `admin`. */
  dispose(): Promise<void>;
}

/**
 * Makes a schema `<prefix>_<random>` on the PostgreSQL test server and writes `seed` (a seed file's
 * content, README "Seed file") beside it, for the tests that run and kill real processes
 * (test/integration/*crash*.test.ts).
 */
export const processSchema = async (prefix: string, seed: unknown): Promise<ProcessSchema> => {
  const schema = `${prefix}_${randomBytes(5).toString('hex')}`;
  const url = new URL(POSTGRES_TEST_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 2 });
  await admin.exec(`CREATE SCHEMA ${schema}`);
  const dir = mkdtempSync(join(tmpdir(), `casebook-${prefix}-`));
  const seedFile = join(dir, 'seed.json');
  writeFileSync(seedFile, JSON.stringify(seed));
  return {
    schema,
    env: { DATABASE_URL: url.toString(), CASEBOOK_SEED: seedFile },
    admin,
    async dispose() {
      await admin.exec(
        `DROP SCHEMA IF EXISTS ${schema} CASCADE; DROP SCHEMA IF EXISTS ${schema}_keys CASCADE`,
      );
      await admin.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
};

/**
 * Polls `check` every 50 ms until it gives a truthy value, which it returns.
 * @throws {Error} naming `what` after `timeoutMs`.
 */
export const eventually = async <T>(
  check: () => Promise<T> | T,
  what: string,
  timeoutMs = 30_000,
): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};
