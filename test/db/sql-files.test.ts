/**
 * Every `.sql` file of src/ (the schema migrations, src/db/migrations.ts) parses with PostgreSQL's
 * own parser (libpg-query), its PL/pgSQL function bodies included (issue 34: SQL in files, checked).
 * The test fixture of the schema before migrations is checked too.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { loadModule, parsePlPgSQLSync, parseSync } from 'libpg-query';
import { ID_SEQUENCES, sequenceName } from '../../src/db/sequences.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Every `.sql` file under `dir`, as paths relative to the repository. */
const sqlFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sqlFiles(path);
    return entry.name.endsWith('.sql') ? [relative(ROOT, path)] : [];
  });

const FILES = [...sqlFiles(join(ROOT, 'src')), ...sqlFiles(join(ROOT, 'test/fixtures'))];

/** The PL/pgSQL functions the file's text parses into. */
const plpgsqlFunctions = (text: string): number =>
  (parsePlPgSQLSync(text) as unknown as { plpgsql_funcs: unknown[] }).plpgsql_funcs.length;

describe('SQL files parse (libpg-query)', () => {
  before(() => loadModule());

  it('finds the event store migrations', () => {
    expect(FILES).to.include('src/eventstore/sql/001_event_store.sql');
  });

  for (const file of FILES)
    it(`${file}: its statements and its PL/pgSQL bodies`, () => {
      const text = readFileSync(join(ROOT, file), 'utf8');
      expect(parseSync(text).stmts?.length ?? 0).to.be.greaterThan(0);
      // Functions in PL/pgSQL and DO blocks (PL/pgSQL by default): the parser checks both.
      const declared =
        (text.match(/LANGUAGE plpgsql/gi)?.length ?? 0) + (text.match(/^DO \$/gim)?.length ?? 0);
      expect(plpgsqlFunctions(text)).to.equal(declared);
    });

  it('the id sequences migrations create one sequence per kind of ID_SEQUENCES, and no other', () => {
    const created = FILES.filter((f) => f.startsWith('src/db/sql/id-sequences/'))
      .flatMap((f) => [
        ...readFileSync(join(ROOT, f), 'utf8').matchAll(/CREATE SEQUENCE IF NOT EXISTS (\w+)/g),
      ])
      .map((m) => m[1]);
    expect([...created].sort()).to.deep.equal(ID_SEQUENCES.map(sequenceName).sort());
  });

  it('fails a file whose statement or PL/pgSQL body does not parse', () => {
    expect(() => parseSync('CREATE TABLE t (a int,);')).to.throw(/syntax error/);
    expect(() =>
      parsePlPgSQLSync('CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETRN 1; END $$;'),
    ).to.throw(/syntax error/);
  });
});
