-- projection_state: each read model's status (live, building, stopped), checkpoint and failure
-- (src/projections/runner/; docs/architecture.md "Projections"). The event store's migrations
-- make it too (its append reads it under the append lock); a rebuild's schema gets its own here.
-- Version 1: as casebook made it before versioned migrations (commit 6b2458c).
CREATE TABLE IF NOT EXISTS projection_state (
  name text PRIMARY KEY,
  status text NOT NULL,
  checkpoint text,
  detail jsonb,
  updated_at timestamptz NOT NULL DEFAULT now()
);
