/** Runs casebook as a real process (npm start / the CLI), as a newcomer would. */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { promisify } from 'node:util';

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
  readonly output: () => string;
  /** SIGTERM: a graceful shutdown. */
  stop(): Promise<void>;
  /** SIGKILL: the process dies at once, as in a crash. */
  kill(): Promise<void>;
}

/** Starts `tsx src/cli/main.ts serve` and resolves once /healthz answers. */
export const startServer = async (env: Record<string, string>): Promise<RunningServer> => {
  const port = await freePort();
  let output = '';
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve'], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d) => {
    output += d;
  });
  child.stderr!.on('data', (d) => {
    output += d;
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited: ${output}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`server did not start: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const exited = once(child, 'exit');
  const signal = async (name: 'SIGTERM' | 'SIGKILL') => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(name);
    await exited;
  };
  return { port, output: () => output, stop: () => signal('SIGTERM'), kill: () => signal('SIGKILL') };
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
