-- The tamper-evident log's seals and leaves (docs/architecture.md "Tamper-evident log"):
-- src/eventstore/seal.ts writes them, src/eventstore/verify.ts checks the log against them.
-- Version 1: the tables as casebook made them before versioned migrations, so a database made then
-- upgrades by running it (IF NOT EXISTS); applied by src/db/migrations.ts as component `seals`.

CREATE TABLE IF NOT EXISTS es_seals (
  seq bigint PRIMARY KEY,
  from_position text,
  to_position text NOT NULL,
  to_commit numeric NOT NULL,
  to_prepare numeric NOT NULL,
  event_count integer NOT NULL,
  previous_hash text NOT NULL,
  head_hash text NOT NULL,
  sealed_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS es_seal_leaves (
  commit_pos numeric NOT NULL,
  prepare_pos numeric NOT NULL,
  event_id uuid NOT NULL,
  leaf text NOT NULL,
  seal_seq bigint NOT NULL,
  PRIMARY KEY (commit_pos, prepare_pos)
);
