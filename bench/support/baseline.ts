/**
 * The raw baselines of `npm run bench:http`: Koa + node-postgres, or Koa + PGlite, with nothing of
 * casebook but its body parsing (`boundedBody`, the same bounded JSON reader every casebook host
 * uses) and, on PGlite, the way casebook opens it (`PgliteSql.open`: its data directory template
 * and settings).
 *
 *   POST /Patient      INSERT the body as jsonb, answer 201 with the id
 *   GET  /Patient/:id  SELECT the body by primary key, answer 200 (404 when absent)
 *
 * Run as a child process: `node --import tsx bench/support/baseline.ts`, with PORT and either
 * BASELINE_DATABASE_URL (a connection string whose search_path names a fresh schema: PostgreSQL)
 * or BASELINE_PGLITE_DIR (a fresh data directory: PGlite). It creates its table,
 * prints `listening <port>` on stdout and serves until SIGTERM.
 */
import { once } from 'node:events';
import Koa from 'koa';
import pg from 'pg';
import { PgliteSql } from '../../src/db/sql.js';
import { boundedBody } from '../../src/http/edge/body.js';

const url = process.env.BASELINE_DATABASE_URL;
const pgliteDir = process.env.BASELINE_PGLITE_DIR;
if (!url === !pgliteDir) throw new Error('one of BASELINE_DATABASE_URL and BASELINE_PGLITE_DIR is required');
/** The database: a node-postgres pool (10 connections, as casebook's) or PGlite (one, in-process). */
const db: { query<R>(text: string, params: unknown[]): Promise<R[]>; end(): Promise<void> } = url
  ? (() => {
      const pool = new pg.Pool({ connectionString: url, max: 10 });
      return {
        query: async <R>(text: string, params: unknown[]) => (await pool.query(text, params)).rows as R[],
        end: () => pool.end(),
      };
    })()
  : await (async () => {
      const pglite = await PgliteSql.open(pgliteDir);
      return {
        query: <R>(text: string, params: unknown[]) => pglite.query(text, params) as Promise<R[]>,
        end: () => pglite.close(),
      };
    })();
await db.query(
  'CREATE TABLE IF NOT EXISTS raw_patients (id bigserial PRIMARY KEY, resource jsonb NOT NULL)',
  [],
);

const app = new Koa();
app.use(boundedBody());
app.use(async (ctx) => {
  if (ctx.method === 'POST' && ctx.path === '/Patient') {
    const rows = await db.query<{ id: string }>(
      'INSERT INTO raw_patients (resource) VALUES ($1) RETURNING id',
      [JSON.stringify(ctx.request.body)],
    );
    ctx.status = 201;
    ctx.body = { resourceType: 'Patient', id: rows[0]?.id };
    return;
  }
  const match = /^\/Patient\/(\d+)$/.exec(ctx.path);
  if (ctx.method === 'GET' && match) {
    const rows = await db.query<{ resource: unknown }>('SELECT resource FROM raw_patients WHERE id = $1', [
      match[1],
    ]);
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
  void db.end().then(() => process.exit(0));
});
