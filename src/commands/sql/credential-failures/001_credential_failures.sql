-- Failure counts of client credentials and addresses, shared by every process
-- (src/commands/credential-guard.ts; docs/architecture.md "Security"): rate-limiter-flexible's
-- columns. `key` is `client:<sha-256 of the claimed id>` or `address:<address>`, `points` the
-- failures counted, `expire` the epoch milliseconds the count or the refusal ends. Not a read
-- model: counts are not events, and a rebuild leaves them.
-- Version 1: as casebook made it before versioned migrations (IF NOT EXISTS); applied by
-- src/db/migrations.ts as component `credential-failures`.

CREATE TABLE IF NOT EXISTS credential_failures (
  key varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);
