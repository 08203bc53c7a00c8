-- The Subscription notifier's checkpoint: the `$all` position up to which it has matched events
-- to subscriptions (src/integration/subscriptions/notifier.ts; docs/architecture.md
-- "Subscriptions"). One row, id 1.
-- Version 1: as casebook made it before versioned migrations (IF NOT EXISTS); applied by
-- src/db/migrations.ts as component `subscription-notifier`.

CREATE TABLE IF NOT EXISTS subscription_notifier_checkpoint (
  id integer PRIMARY KEY,
  position text NOT NULL
);
