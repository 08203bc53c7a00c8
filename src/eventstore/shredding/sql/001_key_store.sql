-- The key store (docs/architecture.md "Erasure"): data keys and identifier secrets wrapped under
-- the KEK, in a schema of their own (KEY_STORE_SCHEMA, default casebook_keys) that backups of the
-- event log leave out. Applied with that schema as the current one, so the names below land there
-- whatever the connection's search_path.

-- The KEK every wrapped key below is wrapped under (its id: 8 bytes of its SHA-256, hex): one row.
CREATE TABLE kek (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  kek_id text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Each tenant's identifier secret (32 bytes), the key of its keyed hashes of identifiers.
CREATE TABLE identifier_secrets (
  tenant_id integer PRIMARY KEY,
  wrapped bytea NOT NULL,
  kek_id text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- One data key per (tenant, subject); the subject (a patient) only as a keyed hash. Destroying a
-- key deletes its wrapped bytes and keeps the row as a tombstone with its time.
CREATE TABLE data_keys (
  tenant_id integer NOT NULL,
  subject_hash text NOT NULL,
  key_id text NOT NULL UNIQUE,
  wrapped bytea,
  kek_id text,
  created_at timestamptz NOT NULL DEFAULT now(),
  destroyed_at timestamptz,
  PRIMARY KEY (tenant_id, subject_hash),
  CHECK ((wrapped IS NULL) = (destroyed_at IS NOT NULL) AND (wrapped IS NULL) = (kek_id IS NULL))
);
