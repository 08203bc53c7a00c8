/**
 * Request bodies in flight share one budget (src/http/edge/body.ts `boundedBody`; docs/interface.md
 * §8): a body that does not fit is refused at once with 503 and Retry-After, unread; a reservation
 * lasts until the request is answered, and refused or malformed bodies give theirs back. Real HTTP
 * on loopback against the real middleware, with a budget of two maximal JSON bodies and a handler
 * that holds its requests until the test lets them go.
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import Koa from 'koa';
import { boundedBody, MAX_JSON_BODY_BYTES } from '../../../src/http/edge/body.js';
import { HttpError } from '../../../src/http/errors.js';

/** A JSON body of exactly `bytes` bytes. */
const jsonOf = (bytes: number) => `{"a":"${'x'.repeat(bytes - 8)}"}`;

describe('bodies in flight', () => {
  let server: ReturnType<Koa['listen']>;
  let url: string;
  let release: () => void = () => {};
  let gate = Promise.resolve();
  /** Requests that reached the handler (their bodies read and reserved) since the last hold(). */
  let entered = 0;
  const hold = () => {
    entered = 0;
    gate = new Promise((resolve) => {
      release = resolve;
    });
  };
  const reached = async (n: number) => {
    while (entered < n) await new Promise((resolve) => setTimeout(resolve, 5));
  };

  before(async () => {
    const app = new Koa();
    app.use(async (ctx, next) => {
      try {
        await next();
      } catch (error) {
        if (!(error instanceof HttpError)) throw error;
        ctx.status = error.status;
        for (const [name, value] of Object.entries(error.headers)) ctx.set(name, value);
        ctx.body = { code: error.code };
      }
    });
    app.use(boundedBody({ bytesInFlight: 2 * MAX_JSON_BODY_BYTES }));
    app.use(async (ctx) => {
      entered++;
      await gate;
      ctx.body = { size: JSON.stringify(ctx.request.body).length };
    });
    server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  after(() => server?.close());

  const post = (body: string | ReadableStream, headers: Record<string, string> = {}) =>
    fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...headers },
      body,
      ...(typeof body === 'string' ? {} : { duplex: 'half' }),
    } as RequestInit);

  it('refuses a body that does not fit with 503 and Retry-After, and takes it once the others are answered', async () => {
    hold();
    const held = [post(jsonOf(MAX_JSON_BODY_BYTES)), post(jsonOf(MAX_JSON_BODY_BYTES))];
    await reached(2);
    const refused = await post(jsonOf(1_000));
    expect(refused.status).to.equal(503);
    expect(refused.headers.get('Retry-After')).to.equal('1');
    expect(await refused.json()).to.deep.equal({ code: 'TooManyBodies' });
    release();
    expect((await Promise.all(held)).map((r) => r.status)).to.deep.equal([200, 200]);
    hold();
    const [a, b] = [post(jsonOf(MAX_JSON_BODY_BYTES)), post(jsonOf(MAX_JSON_BODY_BYTES))];
    await reached(2);
    release();
    expect([(await a).status, (await b).status]).to.deep.equal([200, 200]);
  });

  it('reserves the whole limit for a body without Content-Length, and small bodies fit beside one', async () => {
    hold();
    const chunked = post(
      new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode(jsonOf(100)));
          controller.close();
        },
      }),
    );
    await reached(1);
    // One maximal body is left: a declared 1 MiB fits, a second one does not.
    const fits = post(jsonOf(MAX_JSON_BODY_BYTES));
    await reached(2);
    expect((await post(jsonOf(10))).status).to.equal(503);
    release();
    expect([(await chunked).status, (await fits).status]).to.deep.equal([200, 200]);
  });

  it('gives back the reservation of a refused body: after 20 bodies too large or malformed, two maximal ones fit', async () => {
    gate = Promise.resolve();
    for (let i = 0; i < 10; i++) {
      expect((await post(jsonOf(MAX_JSON_BODY_BYTES + 1))).status).to.equal(413);
      expect((await post('{"a":')).status).to.equal(400);
    }
    hold();
    const both = [post(jsonOf(MAX_JSON_BODY_BYTES)), post(jsonOf(MAX_JSON_BODY_BYTES))];
    await reached(2);
    release();
    expect((await Promise.all(both)).map((r) => r.status)).to.deep.equal([200, 200]);
  });
});
