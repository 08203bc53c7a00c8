/**
 * Subscription endpoints for tests (issue 37): a real HTTP receiver on 127.0.0.1 that answers what
 * the test says and records every request, and the README's signature snippet, evaluated from the
 * README itself.
 */
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { ROOT } from './process.js';

/** The README's signature check, evaluated from the README itself (issue 37: "the documented snippet"). */
export const readmeVerifier = (): ((
  header: string,
  body: string,
  secret: string,
  nowSeconds?: number,
) => boolean) => {
  const readme = readFileSync(`${ROOT}README.md`, 'utf8');
  const match = /<!-- subscription-signature-snippet -->\s*```js\n([\s\S]*?)```/.exec(readme);
  if (!match) throw new Error('README.md has no subscription-signature-snippet');
  return new Function('require', `${match[1]}\nreturn verifyCasebookSignature;`)(
    createRequire(import.meta.url),
  );
};

export interface Received {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly json: any;
  readonly accepted: boolean;
  readonly at: number;
}

/** A subscription endpoint: answers `state.status`, records every request. */
export const receiver = async () => {
  const requests: Received[] = [];
  /** `hang`: requests are recorded and never answered (a receiver that stalls, or a crash mid-request). */
  const state = { status: 200, hang: false };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      requests.push({
        headers: req.headers,
        body,
        json: JSON.parse(body),
        accepted: !state.hang && state.status < 300,
        at: Date.now(),
      });
      if (state.hang) return;
      res.statusCode = state.status;
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  const status = (r: Received) => r.json.entry[0].resource;
  return {
    origin: `http://127.0.0.1:${port}`,
    url: (path = '/hook') => `http://127.0.0.1:${port}${path}`,
    state,
    requests,
    /** Accepted event notifications for `path`: their SubscriptionStatus. */
    notifications: (subscriptionId: string) =>
      requests.filter(
        (r) =>
          r.accepted &&
          status(r).type === 'event-notification' &&
          status(r).subscription.reference.endsWith(`/Subscription/${subscriptionId}`),
      ),
    status,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
};

export type Receiver = Awaited<ReturnType<typeof receiver>>;
