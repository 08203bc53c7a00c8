// Part of `npm run build`: copies every .sql file of src/ (the schema migrations read at run time,
// src/db/migrations.ts) to the same place under dist/, beside the compiled modules that read them.
import { cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

for (const entry of readdirSync('src', { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith('.sql')) continue;
  const from = join(entry.parentPath ?? entry.path, entry.name);
  cpSync(from, join('dist', from.slice('src/'.length)));
}
