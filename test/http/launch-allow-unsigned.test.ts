/**
 * `LAUNCHER_ALLOW_UNSIGNED=true` (issue 12; README "Signed launch links") is for a loopback-only
 * development setup: casebook refuses it on another address, and warns at start when it is on.
 */
import { expect } from 'chai';
import pino from 'pino';
import { openCasebook } from '../../src/casebook.js';
import { loadConfig } from '../../src/config.js';
import { testDatabases } from '../support/databases.js';

const [pglite] = testDatabases.filter((d) => d.name === 'pglite');

/** Opens casebook with `env` and a logger writing into an array; returns what it logged at start. */
const startLog = async (env: Record<string, string>): Promise<{ level: number; msg: string }[]> => {
  const lines: string[] = [];
  const opened = await pglite!.open();
  const casebook = await openCasebook(loadConfig({ DATA_DIR: 'memory://', ...env }), {
    sql: opened.sql,
    logger: pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }),
    project: false,
    export: false,
  });
  await casebook.close();
  await opened.dispose();
  return lines.map((line) => JSON.parse(line) as { level: number; msg: string });
};

const WARNING = /^LAUNCHER_ALLOW_UNSIGNED=true: unsigned launch links are accepted \(loopback only\)/;

describe('LAUNCHER_ALLOW_UNSIGNED', () => {
  it('logs a warning at start when it is true', async () => {
    const log = await startLog({ HOST: '127.0.0.1', LAUNCHER_ALLOW_UNSIGNED: 'true' });
    const warnings = log.filter((l) => WARNING.test(l.msg));
    expect(warnings, JSON.stringify(log)).to.have.length(1);
    expect(warnings[0]!.level).to.equal(40); // pino's warn
  });

  it('logs no such warning when it is false (the default)', async () => {
    const log = await startLog({ HOST: '127.0.0.1', LAUNCHER_ALLOW_UNSIGNED: 'false' });
    expect(log.filter((l) => /LAUNCHER_ALLOW_UNSIGNED/.test(l.msg))).to.deep.equal([]);
  });

  it('is refused unless casebook listens on a loopback address', () => {
    expect(() =>
      loadConfig({ DATA_DIR: 'memory://', HOST: '0.0.0.0', LAUNCHER_ALLOW_UNSIGNED: 'true' }),
    ).to.throw(/LAUNCHER_ALLOW_UNSIGNED=true is only accepted when casebook listens on a loopback address/);
  });
});
