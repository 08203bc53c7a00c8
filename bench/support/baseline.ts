/**
 * The raw baseline of `npm run bench:http`: Koa + node-postgres with nothing of casebook but its
 * body parsing (`boundedBody`, the same bounded JSON reader every casebook host uses).
 *
 *   POST /Patient      INSERT the body as jsonb, answer 201 with the id
 *   GET  /Patient/:id  SELECT the body by primary key, answer 200 (404 when absent)
 *
 * Run as a child process: `node --import tsx bench/support/baseline.ts`, with BASELINE_DATABASE_URL
 * (a connection string whose search_path names a fresh schema) and PORT. It creates its table,
 * prints `listening <port>` on stdout and serves until SIGTERM.
 */
import { once } from 'node:events';
import Koa from 'koa';
import pg from 'pg';
import { boundedBody } from '../../src/http/edge/body.js';

const url = process.env.BASELINE_DATABASE_URL;
if (!url) throw new Error('BASELINE_DATABASE_URL is required');
const pool = new pg.Pool({ connectionString: url, max: 10 });
await pool.query(
  'CREATE TABLE IF NOT EXISTS raw_patients (id bigserial PRIMARY KEY, resource jsonb NOT NULL)',
);

const app = new Koa();
app.use(boundedBody());
app.use(async (ctx) => {
  if (ctx.method === 'POST' && ctx.path === '/Patient') {
    const { rows } = await pool.query<{ id: string }>(
      'INSERT INTO raw_patients (resource) VALUES ($1) RETURNING id',
      [JSON.stringify(ctx.request.body)],
    );
    ctx.status = 201;
    ctx.body = { resourceType: 'Patient', id: rows[0]?.id };
    return;
  }
  const match = /^\/Patient\/(\d+)$/.exec(ctx.path);
  if (ctx.method === 'GET' && match) {
    const { rows } = await pool.query<{ resource: unknown }>(
      'SELECT resource FROM raw_patients WHERE id = $1',
      [match[1]],
    );
    if (rows[0]) ctx.body = rows[0].resource;
    else ctx.status = 404;
    return;
  }
  ctx.status = 404;
});

const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
await once(server, 'listening');
const address = server.address();
console.log(`listening ${typeof address === 'object' && address ? address.port : ''}`);
process.once('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  void pool.end().then(() => process.exit(0));
});
