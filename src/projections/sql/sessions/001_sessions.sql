-- rm_sessions and its apply function in two forms, keyed (an append's batch, one json argument)
-- and bulk (a rebuild's pages, parallel arrays): src/projections/sessions.ts, projection.ts applyCall.
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_sessions (
  id integer PRIMARY KEY,
  tenant_id integer NOT NULL,
  client_id text NOT NULL,
  user_id integer NOT NULL,
  patient_id integer,
  encounter_id integer,
  scopes jsonb NOT NULL,
  deployment_mode text NOT NULL,
  post_submit_redirect text,
  post_cancel_redirect text,
  status text NOT NULL,
  cookie_hash text UNIQUE,
  created_at timestamptz NOT NULL,
  last_modified_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  revision integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS rm_sessions_tenant ON rm_sessions (tenant_id);

CREATE OR REPLACE FUNCTION rm_sessions_apply(batch json) RETURNS void LANGUAGE plpgsql
  SET enable_seqscan = off AS $fn$

BEGIN
WITH given AS (SELECT * FROM json_to_recordset(batch) AS x(id integer, revision integer, created json, status text, cookie_hash text, last_modified_at timestamptz)),
input AS (SELECT g.*, (g.created->>'tenantId')::int AS tenant_id FROM given g),
inserted AS (
  INSERT INTO rm_sessions (id, tenant_id, client_id, user_id, patient_id, encounter_id, scopes, deployment_mode,
    post_submit_redirect, post_cancel_redirect, status, cookie_hash, created_at, last_modified_at, expires_at, revision)
  SELECT id, tenant_id, created->>'clientId', (created->>'userId')::int, (created->>'patientId')::int,
     (created->>'encounterId')::int, (created->'scopes')::jsonb, created->>'deploymentMode',
     created->>'postSubmitRedirect', created->>'postCancelRedirect', status, cookie_hash,
     (created->>'createdAt')::timestamptz, last_modified_at, (created->>'expiresAt')::timestamptz, revision
    FROM input WHERE created IS NOT NULL
  ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, cookie_hash = EXCLUDED.cookie_hash,
    last_modified_at = EXCLUDED.last_modified_at, revision = EXCLUDED.revision
    WHERE rm_sessions.revision < EXCLUDED.revision
  RETURNING id)
UPDATE rm_sessions s SET status = i.status, cookie_hash = i.cookie_hash, last_modified_at = i.last_modified_at,
  revision = i.revision
  FROM input i WHERE i.created IS NULL AND s.id = i.id AND s.revision < i.revision;
END
$fn$;

DROP FUNCTION IF EXISTS rm_sessions_apply_bulk(json);

CREATE OR REPLACE FUNCTION rm_sessions_apply_bulk(c0 integer[], c1 integer[], c2 json, c3 text[], c4 text[], c5 timestamptz[]) RETURNS void LANGUAGE plpgsql
   AS $fn$

BEGIN
WITH given AS (SELECT x.id, x.revision, CASE WHEN json_typeof(x.created) = 'null' THEN NULL ELSE x.created END AS created, x.status, x.cookie_hash, x.last_modified_at, x.n
    FROM ROWS FROM (unnest(c0), unnest(c1), json_array_elements(c2), unnest(c3), unnest(c4), unnest(c5)) WITH ORDINALITY AS x(id, revision, created, status, cookie_hash, last_modified_at, n)),
input AS (SELECT g.*, (g.created->>'tenantId')::int AS tenant_id FROM given g),
inserted AS (
  INSERT INTO rm_sessions (id, tenant_id, client_id, user_id, patient_id, encounter_id, scopes, deployment_mode,
    post_submit_redirect, post_cancel_redirect, status, cookie_hash, created_at, last_modified_at, expires_at, revision)
  SELECT id, tenant_id, created->>'clientId', (created->>'userId')::int, (created->>'patientId')::int,
     (created->>'encounterId')::int, (created->'scopes')::jsonb, created->>'deploymentMode',
     created->>'postSubmitRedirect', created->>'postCancelRedirect', status, cookie_hash,
     (created->>'createdAt')::timestamptz, last_modified_at, (created->>'expiresAt')::timestamptz, revision
    FROM input WHERE created IS NOT NULL
  ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, cookie_hash = EXCLUDED.cookie_hash,
    last_modified_at = EXCLUDED.last_modified_at, revision = EXCLUDED.revision
    WHERE rm_sessions.revision < EXCLUDED.revision
  RETURNING id)
UPDATE rm_sessions s SET status = i.status, cookie_hash = i.cookie_hash, last_modified_at = i.last_modified_at,
  revision = i.revision
  FROM input i WHERE i.created IS NULL AND s.id = i.id AND s.revision < i.revision;
END
$fn$;
