-- Id sequences (docs/architecture.md "Ids"): the integer ids of tenants, sessions and FHIR
-- resources, one sequence per kind of src/db/sequences.ts ID_SEQUENCES (a test holds this file to
-- that list: a new kind is a new version here). Not read models: a rebuild never drops them.
-- Version 1: as casebook made them before versioned migrations (IF NOT EXISTS); applied by
-- src/db/migrations.ts as component `id-sequences`.

CREATE SEQUENCE IF NOT EXISTS casebook_tenant_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_session_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_patient_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_encounter_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_practitioner_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_task_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_questionnaire_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_questionnaireresponse_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_valueset_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_observation_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_condition_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_medicationstatement_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_medication_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_allergyintolerance_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_immunization_id_seq;
CREATE SEQUENCE IF NOT EXISTS casebook_documentreference_id_seq;
