// Part of `npm run build`: copies every .sql file of src/ (the schema migrations read at run time,
// src/db/migrations.ts) to the same place under dist/, beside the compiled modules that read them.
// The .sql files dist/ already holds go first: a migration renamed or removed in src/ must not stay
// behind in dist/, where the migration reader would refuse the folder (two files of one version).
import { cpSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const sqlFiles = (root) =>
  readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.sql'))
    .map((entry) => join(entry.parentPath ?? entry.path, entry.name));

if (existsSync('dist')) for (const stale of sqlFiles('dist')) rmSync(stale);
for (const from of sqlFiles('src')) cpSync(from, join('dist', from.slice('src/'.length)));
