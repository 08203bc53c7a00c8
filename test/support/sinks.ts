/**
 * Real export sinks for tests (issue 15): an HTTP receiver and an MLLP listener on 127.0.0.1 whose
 * behaviour the test changes while they run (answer, fail, hang), recording every delivery.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, type Socket } from 'node:net';

export interface HttpDelivery {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly key: string;
  /** When the request body was complete (epoch ms). */
  readonly at: number;
  readonly accepted: boolean;
}

/**
 * An HTTP receiver. `state.status` answers every request (200 = accepted) after `state.delayMs`;
 * `state.hang(body)` true leaves that request unanswered; `state.onAccepted` runs after a delivery is recorded as
 * accepted and before the answer is sent.
 */
export const httpReceiver = async () => {
  const deliveries: HttpDelivery[] = [];
  const hanging: ServerResponse[] = [];
  const state: {
    status: number;
    hang: (body: string) => boolean;
    onAccepted?: ((delivery: HttpDelivery) => Promise<void> | void) | undefined;
    /** Milliseconds each request waits before it is answered (a slow hospital system). */
    delayMs: number;
  } = { status: 200, hang: () => false, delayMs: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs));
      if (state.hang(body)) {
        hanging.push(res);
        return;
      }
      const delivery: HttpDelivery = {
        headers: req.headers,
        body,
        key: String(req.headers['idempotency-key'] ?? ''),
        at: Date.now(),
        accepted: state.status < 300,
      };
      deliveries.push(delivery);
      if (delivery.accepted) await state.onAccepted?.(delivery);
      res.statusCode = state.status;
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/reports`,
    port,
    state,
    deliveries,
    accepted: () => deliveries.filter((d) => d.accepted),
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
};

/**
 * An MLLP listener answering each message with `MSA|<state.code>|<control id>|<state.text>`
 * (an HL7 ACK), recording the messages.
 */
export const mllpListener = async () => {
  const messages: string[] = [];
  const state = { code: 'AA', text: '' };
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const start = buffer.indexOf(0x0b);
        const end = buffer.indexOf(0x1c, start + 1);
        if (start < 0 || end < 0 || buffer[end + 1] !== 0x0d) return;
        const message = buffer.subarray(start + 1, end).toString('utf8');
        buffer = buffer.subarray(end + 2);
        messages.push(message);
        const controlId = message.split('\r')[0]!.split('|')[9];
        const ack = `MSH|^~\\&|RECEIVER|HOSPITAL|CASEBOOK|CASEBOOK|20260301100000||ACK^R01^ACK|ack-1|P|2.5\rMSA|${state.code}|${controlId}|${state.text}`;
        socket.write(
          Buffer.concat([Buffer.from([0x0b]), Buffer.from(ack, 'utf8'), Buffer.from([0x1c, 0x0d])]),
        );
      }
    });
    socket.on('error', () => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `mllp://127.0.0.1:${port}`,
    state,
    messages,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
};
