-- The event store's tables and its append functions (docs/architecture.md "Event store").
-- Version 1: the schema of casebook up to issue 34 (commit 9e7716e), written so that it applies to
-- an empty schema and to one that schema code made before the migrations (tables created only when
-- missing, functions replaced). Applied by src/db/migrations.ts, recorded in schema_migrations.
-- The advisory lock every append holds shared is APPEND_LOCK_KEY in sql-event-store.ts.
CREATE TABLE IF NOT EXISTS es_streams (
  stream_name text PRIMARY KEY,
  revision bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS es_events (
  position bigserial PRIMARY KEY,
  transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
  event_id uuid NOT NULL UNIQUE,
  stream_name text NOT NULL,
  revision bigint NOT NULL,
  type text NOT NULL,
  -- json, not jsonb: an event's data is kept exactly as written (FHIR element order included).
  data json NOT NULL,
  metadata jsonb NOT NULL,
  UNIQUE (stream_name, revision)
);
CREATE INDEX IF NOT EXISTS es_events_transaction_position_idx ON es_events (transaction_id, position);
-- The state of every projection, read by es_append under the append lock (docs/architecture.md).
CREATE TABLE IF NOT EXISTS projection_state (
  name text PRIMARY KEY,
  status text NOT NULL,
  checkpoint text,
  detail jsonb,
  updated_at timestamptz NOT NULL DEFAULT now()
);
DROP FUNCTION IF EXISTS es_append(json);
DROP FUNCTION IF EXISTS es_append(json, text[]);
-- requests: [{stream, expected, events: [{id, type, metadata}]}], jsonb (parsed once, small).
-- data: a JSON array of every event's data, in the order of the events of all requests. It stays
-- json (stored as written, FHIR element order included) and is parsed once here: json operators
-- re-parse their whole operand, so data inside requests was parsed a dozen times per append.
-- known: the projections the appending process maintains (NULL: no check). A projection that is
-- live but not among them is run by a newer casebook version: the append is refused (CBP01).
CREATE OR REPLACE FUNCTION es_append(requests jsonb, data json, known text[] DEFAULT NULL) RETURNS json LANGUAGE plpgsql AS $fn$
-- casebook es_append v6
DECLARE
  req jsonb;
  i int := 0;
  datas json[] := ARRAY(SELECT d FROM json_array_elements(data) d);
  data_offset int := 0;
  this_offset int;
  ids uuid[];
  stream text;
  expected text;
  current_rev bigint;
  -- The revision of each request's stream, in request order (read under the locks below).
  revs bigint[];
  event_count int;
  -- (not "found": a variable of that name hides PL/pgSQL's FOUND)
  found_count int;
  offsets int;
  same_stream boolean;
  last_rev bigint;
  first_found text;
  written json;
  stream_results json[] := '{}';
  event_results json[] := '{}';
  last_commit text;
  last_position text;
  created text[];
  result json;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtext('casebook-append:' || current_schema()));
  IF known IS NOT NULL THEN
    SELECT p.name INTO stream FROM projection_state p
     WHERE p.status = 'live' AND NOT (p.name = ANY (known)) LIMIT 1;
    IF stream IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'CBP01', MESSAGE = 'unknown live projection', DETAIL = stream;
    END IF;
  END IF;
  -- Every stream new and written to (a create): the streams are made at their last revision and
  -- every event is inserted by one statement, in request order. When one of them exists, those made
  -- here start empty again and the general path below answers (a wrong expected version, a replay).
  IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(requests) r
                  WHERE r->>'expected' <> 'no_stream' OR jsonb_array_length(r->'events') = 0) THEN
    WITH made AS (
      INSERT INTO es_streams (stream_name, revision)
      SELECT r->>'stream', jsonb_array_length(r->'events') - 1 FROM jsonb_array_elements(requests) r ORDER BY 1
      ON CONFLICT DO NOTHING RETURNING stream_name)
    SELECT array_agg(m.stream_name) INTO created FROM made m;
    IF coalesce(array_length(created, 1), 0) = jsonb_array_length(requests) THEN
      WITH req AS (
        SELECT r.value AS request, r.n,
               (coalesce(sum(jsonb_array_length(r.value->'events')) OVER (ORDER BY r.n
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::int AS first_data
          FROM jsonb_array_elements(requests) WITH ORDINALITY r(value, n)),
      inserted AS (
        INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
        SELECT (x.value->>'id')::uuid, req.request->>'stream', x.n - 1, x.value->>'type',
               datas[req.first_data + x.n::int], x.value->'metadata'
          FROM req, jsonb_array_elements(req.request->'events') WITH ORDINALITY x(value, n)
         ORDER BY req.n, x.n
        RETURNING stream_name, revision, transaction_id, position)
      SELECT json_build_object(
        -- (no correlated subquery here: its cost estimate, over rows the planner cannot count, turned JIT on)
        'streams', (SELECT json_agg(json_build_object('stream', i.stream_name, 'revision', i.revision::text,
                      'written', true, 'commit', i.transaction_id::text, 'position', i.position::text)
                      ORDER BY i.position)
                      FROM (SELECT DISTINCT ON (l.stream_name) l.* FROM inserted l
                             ORDER BY l.stream_name, l.revision DESC) i),
        'events', (SELECT json_agg(json_build_object('stream', i.stream_name, 'revision', i.revision::text,
                     'commit', i.transaction_id::text, 'position', i.position::text) ORDER BY i.position)
                     FROM inserted i),
        'projections', (SELECT coalesce(json_object_agg(p.name, p.status), '{}') FROM projection_state p))
        INTO result;
      RETURN result;
    END IF;
    UPDATE es_streams SET revision = -1 WHERE stream_name = ANY (created);
  END IF;
  INSERT INTO es_streams (stream_name, revision)
    SELECT DISTINCT r->>'stream', -1 FROM jsonb_array_elements(requests) r ORDER BY 1
    ON CONFLICT DO NOTHING;
  -- A fixed lock order (by name) keeps concurrent multi-stream appends deadlock-free.
  -- Index lookups by array (= ANY), never a join the planner may turn into a scan of the table.
  -- Each request's revision, read from its locked row: v5 kept them in a jsonb object grown by one
  -- key per stream, which made an append quadratic in its streams.
  WITH locked AS (
    SELECT s.stream_name, s.revision FROM es_streams s
     WHERE s.stream_name = ANY (ARRAY(SELECT r->>'stream' FROM jsonb_array_elements(requests) r))
     ORDER BY s.stream_name FOR UPDATE)
  SELECT array_agg(l.revision ORDER BY r.n) INTO revs
    FROM jsonb_array_elements(requests) WITH ORDINALITY r(value, n)
    JOIN locked l ON l.stream_name = r.value->>'stream';

  -- No event id stored yet (not a replay): every request is checked, then written, by one statement
  -- each for all streams, whatever their number.
  IF NOT EXISTS (SELECT 1 FROM es_events e
                  WHERE e.event_id = ANY (ARRAY(SELECT (x->>'id')::uuid FROM jsonb_array_elements(requests) r,
                                                       jsonb_array_elements(r->'events') x))) THEN
    SELECT r.value->>'stream', r.value->>'expected', revs[r.n] INTO stream, expected, current_rev
      FROM jsonb_array_elements(requests) WITH ORDINALITY r(value, n)
     WHERE NOT (r.value->>'expected' = 'any'
                OR (r.value->>'expected' = 'no_stream' AND revs[r.n] < 0)
                OR (r.value->>'expected' = 'exists' AND revs[r.n] >= 0)
                OR (r.value->>'expected' ~ '^[0-9]+$' AND (r.value->>'expected')::bigint = revs[r.n]))
     ORDER BY r.n LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION USING ERRCODE = 'CBW01', MESSAGE = 'wrong expected version',
        DETAIL = json_build_object('stream', stream, 'expected', expected, 'actual', current_rev::text)::text;
    END IF;
    WITH req AS (
      SELECT r.value AS request, r.value->>'stream' AS stream, r.n, revs[r.n] AS revision,
             jsonb_array_length(r.value->'events') AS event_count,
             (coalesce(sum(jsonb_array_length(r.value->'events')) OVER (ORDER BY r.n
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::int AS first_data
        FROM jsonb_array_elements(requests) WITH ORDINALITY r(value, n)),
    inserted AS (
      INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
      SELECT (x.value->>'id')::uuid, req.stream, req.revision + x.n, x.value->>'type',
             datas[req.first_data + x.n::int], x.value->'metadata'
        FROM req, jsonb_array_elements(req.request->'events') WITH ORDINALITY x(value, n)
       ORDER BY req.n, x.n
      RETURNING stream_name, revision, transaction_id, position),
    bumped AS (
      UPDATE es_streams s SET revision = u.revision
        FROM unnest(ARRAY(SELECT q.stream FROM req q WHERE q.event_count > 0),
                    ARRAY(SELECT q.revision + q.event_count FROM req q WHERE q.event_count > 0)) u(stream, revision)
       WHERE s.stream_name = u.stream),
    last_written AS (
      SELECT DISTINCT ON (l.stream_name) l.* FROM inserted l ORDER BY l.stream_name, l.revision DESC)
    SELECT json_build_object(
      'streams', (SELECT coalesce(json_agg(json_build_object('stream', q.stream,
                    'revision', coalesce(w.revision, q.revision)::text, 'written', w.revision IS NOT NULL,
                    'commit', coalesce(w.transaction_id::text, o.commit, '0'),
                    'position', coalesce(w.position::text, o.position, '0')) ORDER BY q.n), '[]')
                    FROM req q LEFT JOIN last_written w ON w.stream_name = q.stream
                    -- A request without events answers its stream's last event, as stored.
                    LEFT JOIN LATERAL (SELECT e.transaction_id::text AS commit, e.position::text AS position
                                         FROM es_events e
                                        WHERE q.event_count = 0 AND e.stream_name = q.stream
                                        ORDER BY e.revision DESC LIMIT 1) o ON true),
      'events', (SELECT coalesce(json_agg(json_build_object('stream', i.stream_name, 'revision', i.revision::text,
                   'commit', i.transaction_id::text, 'position', i.position::text) ORDER BY i.position), '[]')
                   FROM inserted i),
      'projections', (SELECT coalesce(json_object_agg(p.name, p.status), '{}') FROM projection_state p))
      INTO result;
    RETURN result;
  END IF;

  -- Some event ids are stored: request by request, a replay answers what was stored.
  FOR req IN SELECT * FROM jsonb_array_elements(requests) LOOP
    i := i + 1;
    stream := req->>'stream';
    expected := req->>'expected';
    current_rev := revs[i];
    event_count := jsonb_array_length(req->'events');
    this_offset := data_offset;
    data_offset := data_offset + event_count;

    IF event_count > 0 THEN
      -- Idempotency by event id: all ids stored consecutively on this stream is a replay.
      ids := ARRAY(SELECT (x.value->>'id')::uuid FROM jsonb_array_elements(req->'events') x);
      SELECT count(*), count(DISTINCT e.revision - array_position(ids, e.event_id)),
             coalesce(bool_and(e.stream_name = stream), true),
             max(e.revision), (array_agg(e.event_id::text ORDER BY array_position(ids, e.event_id)))[1]
        INTO found_count, offsets, same_stream, last_rev, first_found
        FROM es_events e WHERE e.event_id = ANY (ids);
      IF found_count > 0 THEN
        IF found_count = event_count AND offsets = 1 AND same_stream THEN
          SELECT e.transaction_id::text, e.position::text INTO last_commit, last_position
            FROM es_events e WHERE e.stream_name = stream AND e.revision = last_rev;
          stream_results := stream_results || json_build_object('stream', stream, 'revision', last_rev::text,
            'written', false, 'commit', last_commit, 'position', last_position);
          CONTINUE;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'CBE01', MESSAGE = 'event id conflict', DETAIL = first_found;
      END IF;
    END IF;

    IF NOT (expected = 'any'
            OR (expected = 'no_stream' AND current_rev < 0)
            OR (expected = 'exists' AND current_rev >= 0)
            OR (expected ~ '^[0-9]+$' AND expected::bigint = current_rev)) THEN
      RAISE EXCEPTION USING ERRCODE = 'CBW01', MESSAGE = 'wrong expected version',
        DETAIL = json_build_object('stream', stream, 'expected', expected, 'actual', current_rev::text)::text;
    END IF;

    IF event_count = 0 THEN
      last_commit := '0';
      last_position := '0';
      SELECT e.transaction_id::text, e.position::text INTO last_commit, last_position
        FROM es_events e WHERE e.stream_name = stream ORDER BY e.revision DESC LIMIT 1;
      stream_results := stream_results || json_build_object('stream', stream, 'revision', current_rev::text,
        'written', false, 'commit', coalesce(last_commit, '0'), 'position', coalesce(last_position, '0'));
      CONTINUE;
    END IF;

    WITH inserted AS (
      INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
      SELECT (x.value->>'id')::uuid, stream, current_rev + x.ordinality, x.value->>'type',
             datas[this_offset + x.ordinality], x.value->'metadata'
        FROM jsonb_array_elements(req->'events') WITH ORDINALITY x
      RETURNING revision, transaction_id, position)
    SELECT json_agg(json_build_object('stream', stream, 'revision', i.revision::text,
             'commit', i.transaction_id::text, 'position', i.position::text) ORDER BY i.revision)
      INTO written FROM inserted i;
    event_results := event_results || ARRAY(SELECT json_array_elements(written));
    current_rev := current_rev + event_count;
    UPDATE es_streams SET revision = current_rev WHERE stream_name = stream;
    stream_results := stream_results || json_build_object('stream', stream, 'revision', current_rev::text,
      'written', true, 'commit', written->(event_count - 1)->>'commit',
      'position', written->(event_count - 1)->>'position');
  END LOOP;

  RETURN json_build_object(
    'streams', array_to_json(stream_results),
    'events', array_to_json(event_results),
    'projections', (SELECT coalesce(json_object_agg(p.name, p.status), '{}') FROM projection_state p));
END
$fn$;
-- es_append, then the inline projections' calls ([{projection, function, argument}]) in the same
-- statement and transaction, under the append lock: a call whose projection is not live raises
-- CBI01, and the appending process runs the append again in a transaction with its hook instead.
CREATE OR REPLACE FUNCTION es_append_inline(requests jsonb, data json, known text[], calls json)
RETURNS json LANGUAGE plpgsql AS $fn$
-- casebook es_append_inline v1
DECLARE
  reply json := es_append(requests, data, known);
  item json;
  status text;
BEGIN
  IF json_array_length(reply->'events') = 0 THEN
    RETURN reply;
  END IF;
  FOR item IN SELECT * FROM json_array_elements(calls) LOOP
    SELECT p.status INTO status FROM projection_state p WHERE p.name = item->>'projection';
    IF status IS DISTINCT FROM 'live' THEN
      RAISE EXCEPTION USING ERRCODE = 'CBI01', MESSAGE = 'projection not live', DETAIL = item->>'projection';
    END IF;
    EXECUTE format('SELECT %I($1)', item->>'function') USING item->'argument';
  END LOOP;
  RETURN reply;
END
$fn$;
-- Several appends of es_append_inline in one statement and transaction (group commit): appends
-- [{requests, data, known, calls}], the replies in the same order. One that fails fails them all:
-- the appending process then sends each alone.
CREATE OR REPLACE FUNCTION es_append_batch(appends json) RETURNS json LANGUAGE plpgsql AS $fn$
-- casebook es_append_batch v1
DECLARE
  item json;
  replies json[] := '{}';
BEGIN
  FOR item IN SELECT * FROM json_array_elements(appends) LOOP
    replies := replies || es_append_inline((item->'requests')::jsonb, item->'data',
      CASE WHEN json_typeof(item->'known') = 'array'
           THEN ARRAY(SELECT json_array_elements_text(item->'known')) END, item->'calls');
  END LOOP;
  RETURN array_to_json(replies);
END
$fn$;
-- Appends whose revisions are known beforehand (every request expects a new stream or a given
-- revision, and has events: POSTs, sessions, updates, report saves), one or a batch, written
-- set-based whatever their number: the streams that exist locked in name order and moved on by one
-- UPDATE, the new ones by one INSERT (in name order), every event by one INSERT, each inline
-- function called once with the rows of every append (their streams, hence their rows, are
-- distinct). The appending process sends them as parallel arrays in log order: per stream its
-- name, expected revision (-1: no stream) and last revision; per event its id, stream, revision
-- and type, and its metadata (jsonb array) and data (json array, kept as written); the projections
-- it knows (NULL: no check); per inline function its projection, name and argument (a json array
-- of the arguments). Parallel arrays instead of one JSON document: json operators re-read their
-- whole operand, and reading a batch's parts out of JSON was a third of the statement
-- (docs/performance.md "Appends: group commit, set-based, parallel arrays"). A stream that is not at its expected revision (CBC01), an event id
-- that is stored (a unique violation), a live projection the process does not know (CBP01) or an
-- inline projection that is not live (CBI01) raises, and the appending process sends each append
-- alone, to es_append_inline when alone already: it tells a replay, a wrong expected version or a
-- conflict. Returns the transaction's id and each event's position, by event id.
DROP FUNCTION IF EXISTS es_append_creates(json);
DROP FUNCTION IF EXISTS es_append_creates(text[], bigint[], uuid[], text[], bigint[], text[], jsonb, json, text[],
  text[], text[], json);
CREATE OR REPLACE FUNCTION es_append_set(streams text[], expected_revisions bigint[], last_revisions bigint[],
  event_ids uuid[], event_streams text[], revisions bigint[], types text[], metadata jsonb, data json, known text[],
  call_projections text[], call_functions text[], call_arguments json)
RETURNS json LANGUAGE plpgsql SET jit = off AS $fn$
-- casebook es_append_set v1
DECLARE
  existing integer;
  made integer;
  result json;
  call record;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtext('casebook-append:' || current_schema()));
  IF known IS NOT NULL AND EXISTS (SELECT 1 FROM projection_state p
                                    WHERE p.status = 'live' AND NOT (p.name = ANY (known))) THEN
    RAISE EXCEPTION USING ERRCODE = 'CBP01', MESSAGE = 'unknown live projection';
  END IF;
  -- The streams that exist, locked in name order (as es_append locks them), each at its revision.
  SELECT count(*) INTO made FROM (
    SELECT 1 FROM es_streams s
      JOIN unnest(streams, expected_revisions) AS x(name, expected) ON s.stream_name = x.name
     WHERE x.expected >= 0 AND s.revision = x.expected
     ORDER BY s.stream_name FOR UPDATE OF s) locked;
  SELECT count(*) INTO existing FROM unnest(expected_revisions) AS x(expected) WHERE x.expected >= 0;
  IF made <> existing THEN
    RAISE EXCEPTION USING ERRCODE = 'CBC01', MESSAGE = 'a stream of the batch is not at its expected revision';
  END IF;
  IF existing > 0 THEN
    UPDATE es_streams s SET revision = x.last
      FROM unnest(streams, expected_revisions, last_revisions) AS x(name, expected, last)
     WHERE x.expected >= 0 AND s.stream_name = x.name;
  END IF;
  INSERT INTO es_streams (stream_name, revision)
  SELECT x.name, x.last FROM unnest(streams, expected_revisions, last_revisions) AS x(name, expected, last)
   WHERE x.expected < 0 ORDER BY 1
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS made = ROW_COUNT;
  IF made <> cardinality(streams) - existing THEN
    RAISE EXCEPTION USING ERRCODE = 'CBC01', MESSAGE = 'a stream of the batch exists';
  END IF;
  WITH inserted AS (
    INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
    SELECT e.id, e.stream, e.revision, e.type, d.value, m.value
      FROM unnest(event_ids, event_streams, revisions, types) WITH ORDINALITY AS e(id, stream, revision, type, n)
      JOIN json_array_elements(data) WITH ORDINALITY AS d(value, n) ON d.n = e.n
      JOIN jsonb_array_elements(metadata) WITH ORDINALITY AS m(value, n) ON m.n = e.n
     ORDER BY e.n
    RETURNING event_id, position)
  SELECT count(*), json_build_object('commit', pg_current_xact_id()::text,
           'ids', array_agg(i.event_id ORDER BY i.position),
           'positions', array_agg(i.position::text ORDER BY i.position))
    INTO made, result FROM inserted i;
  -- Every event has its data and metadata, or nothing is written.
  IF made <> cardinality(event_ids) THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'events, data and metadata differ in number';
  END IF;
  FOR call IN
    SELECT c.projection, c.function, a.argument
      FROM unnest(call_projections, call_functions) WITH ORDINALITY AS c(projection, function, n)
      JOIN json_array_elements(call_arguments) WITH ORDINALITY AS a(argument, n) ON a.n = c.n
     ORDER BY c.n
  LOOP
    IF (SELECT p.status FROM projection_state p WHERE p.name = call.projection) IS DISTINCT FROM 'live' THEN
      RAISE EXCEPTION USING ERRCODE = 'CBI01', MESSAGE = 'projection not live', DETAIL = call.projection;
    END IF;
    EXECUTE format('SELECT %I($1)', call.function) USING call.argument;
  END LOOP;
  RETURN result;
END
$fn$;
