/**
 * Outside text made safe (issue 15): what real failing sinks say — a refused connection, a drop
 * directory the process may not write, an HTTP sink that never answers — becomes a readable
 * reason without paths or control characters before it reaches an event.
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect } from 'chai';
import { failureReason, sanitizeOutsideText } from '../../src/integration/export/outside-text.js';
import { openSink, type Report } from '../../src/integration/export/sinks.js';
import { freePort } from '../support/process.js';

const report: Report = { text: 'Findings: none', idempotencyKey: 'inst:qr-1-v1', responseId: 1, version: 1 };

const reasonOf = async (url: string, timeoutMs = 2000): Promise<string> => {
  const sink = openSink(url, { timeoutMs });
  try {
    await sink.deliver(report);
  } catch (error) {
    return failureReason(error, sink.label);
  }
  throw new Error('the delivery did not fail');
};

describe('outside text in export events', () => {
  it('escapes NUL and every other control character, replaces lone surrogates and bounds the length', () => {
    expect(sanitizeOutsideText('A\u0000E\u0001\u001b[31m\u007f\u0085')).to.equal(
      'A\\x00E\\x01\\x1b[31m\\x7f\\x85',
    );
    expect(sanitizeOutsideText('x\ud800y')).to.equal('x\ufffdy');
    const long = sanitizeOutsideText('é'.repeat(2000));
    expect(long).to.have.length(500);
    expect(long.endsWith('…')).to.equal(true);
  });

  it('names a refused connection by host and port instead of "fetch failed" (HTTP and MLLP)', async () => {
    const port = await freePort();
    expect(await reasonOf(`http://127.0.0.1:${port}/reports`)).to.equal(
      `connection refused by 127.0.0.1:${port}`,
    );
    expect(await reasonOf(`mllp://127.0.0.1:${port}`)).to.equal(`connection refused by 127.0.0.1:${port}`);
  });

  it('says the HTTP sink did not answer within the timeout', async () => {
    const server = createServer(() => undefined).listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    const { port } = server.address() as { port: number };
    try {
      expect(await reasonOf(`http://127.0.0.1:${port}/reports`, 300)).to.equal(
        `no answer from http://127.0.0.1:${port} within the timeout`,
      );
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('keeps the drop directory path out of a permission error', async function () {
    if (process.getuid?.() === 0) {
      console.log('      skipped: running as root, a read-only directory is still writable');
      this.skip();
    }
    const dir = mkdtempSync(join(tmpdir(), 'casebook-readonly-'));
    chmodSync(dir, 0o500);
    try {
      const reason = await reasonOf(pathToFileURL(dir).href);
      expect(reason).to.equal('permission denied (EACCES) writing to the drop directory');
      expect(reason).not.to.include(dir);
    } finally {
      chmodSync(dir, 0o700);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps the drop directory path out of an error when the directory is a file (any user)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'casebook-notdir-'));
    const file = join(dir, 'not-a-directory');
    writeFileSync(file, 'x');
    try {
      const reason = await reasonOf(pathToFileURL(file).href);
      expect(reason).to.match(
        /^the drop directory is not a directory \((EEXIST|ENOTDIR)\) writing to the drop directory$/,
      );
      expect(reason).not.to.include(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('replaces any other absolute path in a message', () => {
    expect(
      failureReason(new Error("EIO: i/o error, open '/var/lib/casebook/drop/506-v1.txt.tmp'"), 'file://'),
    ).to.equal("EIO: i/o error, open '<path>'");
  });
});

/**
 * The file sink is bounded like the HTTP and MLLP sinks (issue 15): a FIFO where the temporary
 * file goes makes the open block, as a hung file system would, until a reader comes.
 */
describe('the file sink under EXPORT_TIMEOUT_MS', () => {
  let dir: string;
  let fifo: string;

  beforeEach(function () {
    dir = mkdtempSync(join(tmpdir(), 'casebook-hung-'));
    fifo = join(dir, 'inst_qr-1-v1.txt.tmp');
    try {
      execFileSync('mkfifo', [fifo]);
    } catch {
      rmSync(dir, { recursive: true, force: true });
      console.log('      skipped: mkfifo is not available');
      this.skip();
    }
  });
  afterEach(async () => {
    // A reader releases the blocked open (and the libuv thread it holds); the aborted write then
    // closes without writing.
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    await new Promise((r) => setTimeout(r, 200));
    closeSync(reader);
    expect(readdirSync(dir), 'a late write is not renamed into place').to.deep.equal([
      'inst_qr-1-v1.txt.tmp',
    ]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('fails a write that does not finish within the timeout, with a reason that names no path', async () => {
    const started = Date.now();
    const reason = await reasonOf(pathToFileURL(dir).href, 300);
    const elapsed = Date.now() - started;
    expect(reason).to.equal('the drop directory did not finish the write within 300 ms');
    expect(reason).not.to.include(dir);
    expect(elapsed).to.be.within(290, 2000);
  });

  it('ends a hung write at once when the exporter stops (its abort signal)', async () => {
    const sink = openSink(pathToFileURL(dir).href, { timeoutMs: 60_000 });
    const stopping = new AbortController();
    const started = Date.now();
    setTimeout(() => stopping.abort(), 100);
    const error = await sink.deliver(report, stopping.signal).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((error as Error | undefined)?.message).to.equal('the delivery was aborted');
    expect(Date.now() - started).to.be.below(2000);
  });

  it('still writes <key>.txt atomically when the file system answers', async () => {
    const other = mkdtempSync(join(tmpdir(), 'casebook-drop-'));
    try {
      await openSink(pathToFileURL(other).href, { timeoutMs: 300 }).deliver(report);
      expect(readdirSync(other)).to.deep.equal(['inst_qr-1-v1.txt']);
      expect(readFileSync(join(other, 'inst_qr-1-v1.txt'), 'utf8')).to.equal(report.text);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });
});
