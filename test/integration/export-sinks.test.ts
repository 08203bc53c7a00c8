/**
 * A sink that answers too much (src/integration/export/sinks.ts `MAX_SINK_ANSWER_BYTES`): the
 * report export reads at most 64 KiB of a receiver's answer. An HTTP receiver's body was read
 * whole (`arrayBuffer`), and an MLLP receiver's bytes were gathered until an acknowledgement or the
 * timeout: a receiver streaming without end could fill the memory of the process. Real servers on
 * loopback stream up to 256 MB here; the test counts what they managed to send.
 */
import { once } from 'node:events';
import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, type Socket } from 'node:net';
import { expect } from 'chai';
import { MAX_SINK_ANSWER_BYTES, openSink, type Report } from '../../src/integration/export/sinks.js';

const STREAMED = 256 * 1024 * 1024;
/** What a cut-off answer may have cost: our limit, plus what the kernel's socket buffers hold. */
const AT_MOST_SENT = 16 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 'x');

const report: Report = { text: 'Findings: none.', idempotencyKey: 'k-1', responseId: 1, version: 1 };

/** Resolves true once `socket` drains, false once it closes (listeners removed either way). */
const drainedOrClosed = (socket: NodeJS.EventEmitter) =>
  new Promise<boolean>((resolve) => {
    const onDrain = () => {
      socket.off('close', onClose);
      resolve(true);
    };
    const onClose = () => {
      socket.off('drain', onDrain);
      resolve(false);
    };
    socket.once('drain', onDrain);
    socket.once('close', onClose);
  });

/** Writes up to STREAMED bytes to `write`, respecting backpressure; resolves with what was sent. */
const stream = async (socket: Socket, write: (chunk: Buffer) => boolean) => {
  let sent = 0;
  try {
    while (sent < STREAMED) {
      if (!write(CHUNK) && !(await drainedOrClosed(socket))) break;
      sent += CHUNK.length;
    }
  } catch {
    // The client went away.
  }
  return sent;
};

describe('report export against a sink that answers without end', function () {
  this.timeout(60_000);

  for (const status of [200, 500]) {
    it(`HTTP ${status}: takes the status, reads at most ${MAX_SINK_ANSWER_BYTES} bytes of the body and hangs up`, async () => {
      let sent: Promise<number> | undefined;
      const server = createHttpServer((req, res) => {
        req.resume();
        res.writeHead(status, { 'Content-Type': 'text/plain' });
        sent = stream(res.socket!, (chunk) => res.write(chunk));
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      try {
        const { port } = server.address() as AddressInfo;
        const sink = openSink(`http://127.0.0.1:${port}/reports`, { timeoutMs: 30_000 });
        const delivered = sink.deliver(report);
        if (status === 200) await delivered;
        else
          await delivered.then(
            () => expect.fail('a 500 is not a delivery'),
            (error: Error) => expect(error.message).to.equal('HTTP 500 from the export sink'),
          );
        expect(await sent).to.be.below(AT_MOST_SENT);
      } finally {
        server.closeAllConnections();
        server.close();
      }
    });
  }

  it('MLLP: refuses an answer that brings no acknowledgement within the limit, long before the timeout', async () => {
    let sent: Promise<number> | undefined;
    const server = createTcpServer((socket) => {
      socket.on('error', () => undefined);
      sent = stream(socket, (chunk) => socket.write(chunk));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      const sink = openSink(`mllp://127.0.0.1:${port}`, { timeoutMs: 30_000 });
      const started = Date.now();
      const error = await sink.deliver(report).then(
        () => expect.fail('bytes without an acknowledgement are not a delivery'),
        (e: Error) => e,
      );
      expect(error.message).to.equal(
        `the HL7 receiver sent more than ${MAX_SINK_ANSWER_BYTES} bytes without an acknowledgement`,
      );
      // Cut off at the limit, not at the 30 s timeout.
      expect(Date.now() - started).to.be.below(15_000);
      expect(await sent).to.be.below(AT_MOST_SENT);
    } finally {
      server.close();
    }
  });
});
