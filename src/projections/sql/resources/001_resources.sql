-- rm_resources, rm_resource_identifiers and their apply function in two forms, keyed (an append's
-- batch, one json argument) and bulk (a rebuild's pages, parallel arrays): src/projections/resources.ts.
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_resources (
  resource_type text NOT NULL,
  id integer NOT NULL,
  tenant_id integer NOT NULL,
  version_id integer NOT NULL,
  content json NOT NULL,
  last_updated timestamptz NOT NULL,
  deleted boolean NOT NULL,
  patient_id integer,
  encounter_id integer,
  project text,
  author text,
  practitioner_ids integer[],
  questionnaire text,
  search_tokens text[],
  search_dates text[],
  PRIMARY KEY (resource_type, id)
);
-- Read models made before $everything's columns: their rows keep NULL (read from the content,
-- see everythingLinksOf) until a rebuild.
ALTER TABLE rm_resources ADD COLUMN IF NOT EXISTS practitioner_ids integer[];
ALTER TABLE rm_resources ADD COLUMN IF NOT EXISTS questionnaire text;
-- The search index of the R5 parameters (issue 35): rows written before it are found by those
-- parameters once the read model is rebuilt (casebook replay).
ALTER TABLE rm_resources ADD COLUMN IF NOT EXISTS search_tokens text[];
ALTER TABLE rm_resources ADD COLUMN IF NOT EXISTS search_dates text[];
CREATE INDEX IF NOT EXISTS rm_resources_patient ON rm_resources (tenant_id, patient_id);
CREATE INDEX IF NOT EXISTS rm_resources_encounter ON rm_resources (tenant_id, encounter_id);
CREATE TABLE IF NOT EXISTS rm_resource_identifiers (
  resource_type text NOT NULL,
  tenant_id integer NOT NULL,
  system text NOT NULL,
  value text NOT NULL,
  id integer NOT NULL,
  PRIMARY KEY (resource_type, tenant_id, system, value, id)
);
CREATE INDEX IF NOT EXISTS rm_resource_identifiers_resource ON rm_resource_identifiers (resource_type, id);

CREATE OR REPLACE FUNCTION rm_resources_apply(batch json) RETURNS integer LANGUAGE plpgsql
  SET enable_seqscan = off AS $fn$

DECLARE
  n integer;
BEGIN
WITH input AS (SELECT * FROM json_to_recordset(batch) AS x(resource_type text, id integer, tenant_id integer, version_id integer, content json, last_updated timestamptz, deleted boolean, patient_id integer, encounter_id integer, project text, author text, created boolean, identifiers json, practitioner_ids integer[], questionnaire text, search_tokens text[], search_dates text[])),
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

DROP FUNCTION IF EXISTS rm_resources_apply_bulk(json);

CREATE OR REPLACE FUNCTION rm_resources_apply_bulk(c0 text[], c1 integer[], c2 integer[], c3 integer[], c4 json, c5 timestamptz[], c6 boolean[], c7 integer[], c8 integer[], c9 text[], c10 text[], c11 boolean[], c12 json, c13 text[], c14 text[], c15 text[], c16 text[]) RETURNS integer LANGUAGE plpgsql
   AS $fn$

DECLARE
  n integer;
BEGIN
WITH input AS (SELECT x.resource_type, x.id, x.tenant_id, x.version_id, CASE WHEN json_typeof(x.content) = 'null' THEN NULL ELSE x.content END AS content, x.last_updated, x.deleted, x.patient_id, x.encounter_id, x.project, x.author, x.created, CASE WHEN json_typeof(x.identifiers) = 'null' THEN NULL ELSE x.identifiers END AS identifiers, x.practitioner_ids::integer[] AS practitioner_ids, x.questionnaire, x.search_tokens::text[] AS search_tokens, x.search_dates::text[] AS search_dates, x.n
    FROM ROWS FROM (unnest(c0), unnest(c1), unnest(c2), unnest(c3), json_array_elements(c4), unnest(c5), unnest(c6), unnest(c7), unnest(c8), unnest(c9), unnest(c10), unnest(c11), json_array_elements(c12), unnest(c13), unnest(c14), unnest(c15), unnest(c16)) WITH ORDINALITY AS x(resource_type, id, tenant_id, version_id, content, last_updated, deleted, patient_id, encounter_id, project, author, created, identifiers, practitioner_ids, questionnaire, search_tokens, search_dates, n)),
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
