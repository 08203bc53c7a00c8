-- Version 2: one body. The changes a batch makes to rm_sessions are written by one function,
-- rm_sessions_write(rm_sessions_change[]); its two entry points only turn their input into that
-- array: rm_sessions_apply(batch json), the keyed form an append runs inline (a small batch, by
-- key: enable_seqscan off for the call), and rm_sessions_apply_bulk(c0 … c5), a rebuild's pages as
-- parallel arrays, planned as the planner likes (src/projections/projection.ts applyCall;
-- docs/architecture.md "Projections"; docs/performance.md "Parallel arrays instead of
-- `json_to_recordset`"). A change's columns are src/projections/sessions.ts APPLY_COLUMNS, in order.

-- The change type, made in the current schema when it lacks one: not by DROP and CREATE, which
-- in a rebuild's schema (first on the search path, before the live one; src/projections/rebuild-beside.ts)
-- would find and drop the live schema's type and function.
DO $do$
BEGIN
  IF to_regtype(quote_ident(current_schema()) || '.rm_sessions_change') IS NULL THEN
    CREATE TYPE rm_sessions_change AS (
      id integer,
      revision integer,
      created json,
      status text,
      cookie_hash text,
      last_modified_at timestamptz
    );
  END IF;
END
$do$;

-- Creations are inserted (or update an older row); other changes update rows below their revision.
CREATE OR REPLACE FUNCTION rm_sessions_write(changes rm_sessions_change[]) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
WITH input AS (SELECT c.*, (c.created->>'tenantId')::int AS tenant_id FROM unnest(changes) AS c),
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

CREATE OR REPLACE FUNCTION rm_sessions_apply(batch json) RETURNS void LANGUAGE plpgsql
  SET enable_seqscan = off AS $fn$
BEGIN
  PERFORM rm_sessions_write(ARRAY(SELECT json_populate_recordset(NULL::rm_sessions_change, batch)));
END
$fn$;

CREATE OR REPLACE FUNCTION rm_sessions_apply_bulk(c0 integer[], c1 integer[], c2 json, c3 text[], c4 text[],
  c5 timestamptz[]) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM rm_sessions_write(ARRAY(
    SELECT ROW(x.id, x.revision, CASE WHEN json_typeof(x.created) = 'null' THEN NULL ELSE x.created END,
               x.status, x.cookie_hash, x.last_modified_at)::rm_sessions_change
      FROM ROWS FROM (unnest(c0), unnest(c1), json_array_elements(c2), unnest(c3), unnest(c4), unnest(c5))
        AS x(id, revision, created, status, cookie_hash, last_modified_at)));
END
$fn$;
