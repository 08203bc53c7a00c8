/**
 * No statement orders by a column it selects as a cast under the column's own name (issue 33).
 * `SELECT commit_pos::text … ORDER BY commit_pos` orders the text output column, since ORDER BY
 * resolves a bare name to an output column first: "100" came before "99", `casebook verify` called
 * a clean log tampered and the AuditEvent search skipped records. Checked on every string and
 * template literal of src/ (read by TypeScript's parser) that holds a SELECT and an ORDER BY.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import ts from 'typescript';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');

const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });

/** The text of every string and template literal of `file` (a template's placeholders as `$x`). */
const literalsOf = (file: string): string[] => {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) found.push(node.text);
    else if (ts.isTemplateExpression(node))
      found.push(node.head.text + node.templateSpans.map((span) => `$x${span.literal.text}`).join(''));
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
};

/** The paren depth at each character of `sql`. */
const depths = (sql: string): number[] => {
  let depth = 0;
  return [...sql].map((c) => {
    if (c === '(') return depth++;
    if (c === ')') return --depth;
    return depth;
  });
};

/**
 * The bare names that `sql` selects as a cast under the name of the column cast (`x::text`,
 * `t.x::text`, `x::text AS x`) and then orders by at the same level: each is a text ordering.
 */
const textOrderings = (sql: string): string[] => {
  const depth = depths(sql);
  const problems: string[] = [];
  for (const select of sql.matchAll(/\bSELECT\b/gi)) {
    const level = depth[select.index]!;
    // The select list: up to FROM at the same level.
    let end = select.index + 6;
    for (; end < sql.length; end++) {
      if (depth[end]! < level) break;
      if (depth[end] === level && /^FROM\b/i.test(sql.slice(end)) && /\W/.test(sql[end - 1]!)) break;
    }
    const list = sql.slice(select.index + 6, end);
    const listDepth = depth.slice(select.index + 6, end);
    const names = new Set<string>();
    for (const cast of list.matchAll(/(?<![\w.])(?:\w+\.)?(\w+)::\w+(?:\[\])?(\s+AS\s+(\w+))?/gi))
      if (listDepth[cast.index] === level && (cast[3] === undefined || cast[3] === cast[1]))
        names.add(cast[1]!);
    if (names.size === 0) continue;
    // The ORDER BY of this SELECT: at the same level, after the select list, before the level ends.
    let close = end;
    while (close < sql.length && depth[close]! >= level) close++;
    for (const order of sql.slice(end, close).matchAll(/\bORDER\s+BY\b/gi)) {
      const at = end + order.index;
      if (depth[at] !== level) continue;
      const clause = sql.slice(at + order[0].length, close).split(/\b(?:LIMIT|OFFSET|FOR|FETCH)\b|;/i)[0]!;
      for (const name of names) if (new RegExp(`(?<![\\w.])${name}(?!\\w)`).test(clause)) problems.push(name);
    }
  }
  return problems;
};

describe('SQL ordering (issue 33)', () => {
  it('finds a text ordering where there is one, and none where ORDER BY names the column', () => {
    expect(
      textOrderings(
        'SELECT commit_pos::text, prepare_pos::text FROM es_seal_leaves ORDER BY commit_pos, prepare_pos LIMIT 5',
      ),
    ).to.deep.equal(['commit_pos', 'prepare_pos']);
    expect(textOrderings('SELECT seq::text AS seq, content FROM t WHERE a ORDER BY seq DESC')).to.deep.equal([
      'seq',
    ]);
    expect(textOrderings('SELECT e.position::text FROM es_events e ORDER BY position')).to.deep.equal([
      'position',
    ]);
    expect(textOrderings('SELECT seq::text AS seq_text FROM t ORDER BY seq DESC')).to.deep.equal([]);
    expect(textOrderings('SELECT c::text AS c FROM t ORDER BY t.c')).to.deep.equal([]);
    expect(
      textOrderings(
        'SELECT json_agg(x ORDER BY i.position), i.position::text AS p FROM i ORDER BY i.position',
      ),
    ).to.deep.equal([]);
    expect(textOrderings('SELECT (SELECT n::text FROM u) AS m FROM t ORDER BY n')).to.deep.equal([]);
  });

  it('no statement of src/ orders by a column it selects as a cast under the same name', () => {
    const files = sourceFiles(SRC);
    expect(files.length).to.be.greaterThan(100);
    const problems = files.flatMap((file) =>
      literalsOf(file)
        .filter((text) => /\bSELECT\b/i.test(text) && /\bORDER\s+BY\b/i.test(text))
        .flatMap((text) => textOrderings(text).map((name) => `${relative(SRC, file)}: ORDER BY ${name}`)),
    );
    expect(problems).to.deep.equal([]);
  });
});
