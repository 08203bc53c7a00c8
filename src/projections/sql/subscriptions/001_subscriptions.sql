-- rm_subscriptions and rm_subscription_notifications (src/projections/subscriptions.ts).
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_subscriptions (
  id text PRIMARY KEY,
  tenant_id integer NOT NULL,
  owner text NOT NULL,
  status text NOT NULL,
  resource json NOT NULL,
  version integer NOT NULL,
  last_updated timestamptz NOT NULL,
  created_position text NOT NULL,
  events_since integer NOT NULL DEFAULT 0,
  delivered_through integer NOT NULL DEFAULT 0,
  failed_attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  failing_since timestamptz,
  last_error text,
  last_delivered_at timestamptz,
  revision integer NOT NULL
);
CREATE INDEX IF NOT EXISTS rm_subscriptions_tenant ON rm_subscriptions (tenant_id, status);
CREATE TABLE IF NOT EXISTS rm_subscription_notifications (
  subscription_id text NOT NULL,
  event_number integer NOT NULL,
  stream_revision bigint NOT NULL,
  decided_at timestamptz NOT NULL,
  delivered_at timestamptz,
  PRIMARY KEY (subscription_id, event_number)
);
