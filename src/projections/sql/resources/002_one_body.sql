-- Version 2: one body. The changes a batch makes to rm_resources and rm_resource_identifiers are
-- written by one function, rm_resources_write(rm_resources_change[]); its two entry points only
-- turn their input into that array: rm_resources_apply(batch json), the keyed form an append runs
-- inline (a small batch, by key: enable_seqscan off for the call), and rm_resources_apply_bulk(c0 …
-- c16), a rebuild's pages as parallel arrays, planned as the planner likes
-- (src/projections/projection.ts applyCall; docs/architecture.md "Projections";
-- docs/performance.md "Parallel arrays instead of `json_to_recordset`"). A change's columns are
-- src/projections/resources.ts APPLY_COLUMNS, in order.

-- The change type, made in the current schema when it lacks one: not by DROP and CREATE, which
-- in a rebuild's schema (first on the search path, before the live one; src/projections/rebuild-beside.ts)
-- would find and drop the live schema's type and function.
DO $do$
BEGIN
  IF to_regtype(quote_ident(current_schema()) || '.rm_resources_change') IS NULL THEN
    CREATE TYPE rm_resources_change AS (
      resource_type text,
      id integer,
      tenant_id integer,
      version_id integer,
      content json,
      last_updated timestamptz,
      deleted boolean,
      patient_id integer,
      encounter_id integer,
      project text,
      author text,
      created boolean,
      identifiers json,
      practitioner_ids integer[],
      questionnaire text,
      search_tokens text[],
      search_dates text[]
    );
  END IF;
END
$do$;

-- Returns the number of resources written (a change at or below a row's version writes nothing).
CREATE OR REPLACE FUNCTION rm_resources_write(changes rm_resources_change[]) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  n integer;
BEGIN
WITH input AS (SELECT * FROM unnest(changes)),
inserted AS (
  INSERT INTO rm_resources (resource_type, id, tenant_id, version_id, content, last_updated, deleted,
                        patient_id, encounter_id, project, author, practitioner_ids, questionnaire,
                        search_tokens, search_dates)
  SELECT resource_type, id, tenant_id, version_id, content, last_updated, deleted, patient_id, encounter_id,
     project, author, practitioner_ids, questionnaire, search_tokens, search_dates FROM input WHERE created
  ON CONFLICT (resource_type, id) DO UPDATE SET version_id = EXCLUDED.version_id, content = EXCLUDED.content,
    last_updated = EXCLUDED.last_updated, deleted = EXCLUDED.deleted, patient_id = EXCLUDED.patient_id,
    encounter_id = EXCLUDED.encounter_id, practitioner_ids = EXCLUDED.practitioner_ids,
    questionnaire = EXCLUDED.questionnaire, search_tokens = EXCLUDED.search_tokens,
    search_dates = EXCLUDED.search_dates
    WHERE rm_resources.version_id < EXCLUDED.version_id
  -- xmax is 0 on a row this statement inserted, and set on one it updated instead (a creation
  -- delivered again): only an updated row can hold identifiers that must go.
  RETURNING resource_type, id, tenant_id, xmax <> 0 AS replaced),
updated AS (
  UPDATE rm_resources r SET version_id = i.version_id, content = coalesce(i.content, r.content),
    last_updated = i.last_updated, deleted = i.deleted,
    patient_id = CASE WHEN i.content IS NULL THEN r.patient_id ELSE i.patient_id END,
    encounter_id = CASE WHEN i.content IS NULL THEN r.encounter_id ELSE i.encounter_id END,
    practitioner_ids = CASE WHEN i.content IS NULL THEN r.practitioner_ids ELSE i.practitioner_ids END,
    questionnaire = CASE WHEN i.content IS NULL THEN r.questionnaire ELSE i.questionnaire END,
    search_tokens = CASE WHEN i.content IS NULL THEN r.search_tokens ELSE i.search_tokens END,
    search_dates = CASE WHEN i.content IS NULL THEN r.search_dates ELSE i.search_dates END
  FROM input i
  WHERE NOT i.created AND r.resource_type = i.resource_type AND r.id = i.id AND r.version_id < i.version_id
  RETURNING r.resource_type, r.id, r.tenant_id, true AS replaced),
written AS (SELECT * FROM inserted UNION ALL SELECT * FROM updated),
wanted AS (
  SELECT w.resource_type, w.id, w.tenant_id, s.system, s.value
    FROM written w JOIN input i ON i.resource_type = w.resource_type AND i.id = w.id,
     json_to_recordset(i.identifiers) AS s(system text, value text)),
removed AS (
  DELETE FROM rm_resource_identifiers d USING written w
   WHERE w.replaced AND d.resource_type = w.resource_type AND d.id = w.id
     AND NOT EXISTS (SELECT 1 FROM wanted n WHERE n.resource_type = d.resource_type AND n.id = d.id
                   AND n.tenant_id = d.tenant_id AND n.system = d.system AND n.value = d.value)),
added AS (
  INSERT INTO rm_resource_identifiers (resource_type, tenant_id, system, value, id)
  SELECT resource_type, tenant_id, system, value, id FROM wanted ON CONFLICT DO NOTHING)
SELECT count(*)::int INTO n FROM written;
RETURN n;
END
$fn$;

CREATE OR REPLACE FUNCTION rm_resources_apply(batch json) RETURNS integer LANGUAGE plpgsql
  SET enable_seqscan = off AS $fn$
BEGIN
  RETURN rm_resources_write(ARRAY(SELECT json_populate_recordset(NULL::rm_resources_change, batch)));
END
$fn$;

CREATE OR REPLACE FUNCTION rm_resources_apply_bulk(c0 text[], c1 integer[], c2 integer[], c3 integer[], c4 json,
  c5 timestamptz[], c6 boolean[], c7 integer[], c8 integer[], c9 text[], c10 text[], c11 boolean[], c12 json,
  c13 text[], c14 text[], c15 text[], c16 text[]) RETURNS integer LANGUAGE plpgsql AS $fn$
BEGIN
  RETURN rm_resources_write(ARRAY(
    SELECT ROW(x.resource_type, x.id, x.tenant_id, x.version_id,
               CASE WHEN json_typeof(x.content) = 'null' THEN NULL ELSE x.content END, x.last_updated,
               x.deleted, x.patient_id, x.encounter_id, x.project, x.author, x.created,
               CASE WHEN json_typeof(x.identifiers) = 'null' THEN NULL ELSE x.identifiers END,
               x.practitioner_ids::integer[], x.questionnaire, x.search_tokens::text[],
               x.search_dates::text[])::rm_resources_change
      FROM ROWS FROM (unnest(c0), unnest(c1), unnest(c2), unnest(c3), json_array_elements(c4), unnest(c5),
                      unnest(c6), unnest(c7), unnest(c8), unnest(c9), unnest(c10), unnest(c11),
                      json_array_elements(c12), unnest(c13), unnest(c14), unnest(c15), unnest(c16))
        AS x(resource_type, id, tenant_id, version_id, content, last_updated, deleted, patient_id, encounter_id,
             project, author, created, identifiers, practitioner_ids, questionnaire, search_tokens,
             search_dates)));
END
$fn$;
