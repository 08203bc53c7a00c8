/**
 * A {@link Sql} handle that writes down what is sent through it, for tests that count statements
 * (group commit, batched reads, the one-statement append).
 */
import type { Row, Sql } from '../../src/db/sql.js';

/**
 * `sql`, writing down in `statements` every statement and transaction sent through it (its
 * transactions and held connections too). `before`, when given, runs before each query is sent
 * (a test holds a statement in flight with it).
 */
export const recordingSql =
  (statements: string[], before?: (text: string) => Promise<void>) =>
  (sql: Sql): Sql => {
    // Queries one after the other, as a connection runs them (node-postgres deprecates sending a
    // query on a client that is still running one).
    let last: Promise<unknown> = Promise.resolve();
    return {
      kind: sql.kind,
      get inTransaction() {
        return sql.inTransaction;
      },
      get shared() {
        return sql.shared;
      },
      query: <R extends Row = Row>(text: string, params?: readonly unknown[]) => {
        statements.push(text);
        const run = async () => {
          await before?.(text);
          return sql.query<R>(text, params);
        };
        if (sql.shared) return run();
        const result = last.then(run, run);
        last = result.catch(() => undefined);
        return result;
      },
      exec: (text) => {
        statements.push(text);
        return sql.exec(text);
      },
      transaction: (fn) => {
        statements.push('BEGIN');
        return sql.transaction((tx) => fn(recordingSql(statements, before)(tx)));
      },
      withConnection: (fn) => sql.withConnection((conn) => fn(recordingSql(statements, before)(conn))),
      listen: (channel, onNotify) => sql.listen(channel, onNotify),
      close: () => sql.close(),
    };
  };
