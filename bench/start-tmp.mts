const t0 = performance.now();
const lap = (what: string) =>
  console.log(
    what,
    Math.round(performance.now() - t0),
    'ms',
    Math.round(process.memoryUsage().rss / 1048576),
    'MiB',
  );
const { openCasebook, openDatabase } = await import('../src/casebook.js');
const { loadConfig } = await import('../src/config.js');
const { createHttpApp } = await import('../src/http/app.js');
const { bootstrapDemo } = await import('../src/commands/seed.js');
lap('modules');
const config = loadConfig({ ...process.env, DATA_DIR: process.argv[2], LOG_LEVEL: 'warn' });
const sql = await openDatabase(config);
lap('pglite open');
const cb = await openCasebook(config, { sql });
lap('openCasebook');
await bootstrapDemo(cb);
lap('bootstrap');
createHttpApp(cb);
lap('app');
await cb.close();
