-- Version 4 (issue 34; docs/performance.md "es_append plans once per connection" and "Audit
-- batches append in one statement"): es_append as version 2 describes it, with two changes that
-- answer nothing differently.
--
-- Its plans are made once per connection (plan_cache_mode): PL/pgSQL planned each statement
-- anew on every call ("custom plans") until the generic plan looked no dearer, and for statements
-- over array arguments it never did: every call planned its dozen statements again, ~0.5 ms of
-- PostgreSQL CPU (an audit batch's append, measured with pgbench and no WAL wait: 1.05 ms, 0.53 ms
-- with generic plans; a 500-event append of two streams 9.9 ms against 8.6 ms). The generic plans
-- find streams and event ids by index (enable_seqscan off, version 3).
--
-- An append of one new stream with no read model to call (what the audit trail writes for every
-- batch of audited reads, src/commands/audit.ts) is one statement instead of eight: 0.36–0.5 ms
-- against 0.7–0.9 ms a call in the same pgbench runs. When it writes nothing (the stream exists,
-- an id is stored), the general path answers as before.
CREATE OR REPLACE FUNCTION es_append(request_appends integer[], request_streams text[], request_expected bigint[],
  request_counts integer[], event_ids uuid[], event_types text[], metadata jsonb, data json, known text[],
  call_appends integer[], call_projections text[], call_functions text[], call_arguments json)
RETURNS json LANGUAGE plpgsql
  SET jit = off SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $fn$
-- The variables (status, revision…) name columns too: unqualified, a name is the variable.
#variable_conflict use_variable
DECLARE
  appends integer := coalesce(request_appends[cardinality(request_appends)], 0);
  events integer := coalesce(cardinality(event_ids), 0);
  refused text;
  -- Per append.
  status text[] := array_fill('ok'::text, ARRAY[appends]);
  detail text[] := array_fill(NULL::text, ARRAY[appends]);
  -- Per request.
  outcome text[];
  revision bigint[];
  commits text[];
  positions text[];
  refusals text[];
  made text[];
  locked_streams text[];
  locked_revisions bigint[];
  event_positions text[];
  call record;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtext('casebook-append:' || current_schema()));
  IF cardinality(request_streams) <> (SELECT count(DISTINCT s) FROM unnest(request_streams) s)
     OR events <> (SELECT coalesce(sum(c), 0) FROM unnest(request_counts) c)
     OR events <> coalesce(cardinality(event_types), 0)
     OR events <> jsonb_array_length(metadata) OR events <> json_array_length(data) THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = 'es_append: a stream twice, or events, types, metadata and data that differ in number';
  END IF;
  IF known IS NOT NULL THEN
    SELECT p.name INTO refused FROM projection_state p
     WHERE p.status = 'live' AND NOT (p.name = ANY (known)) ORDER BY p.name LIMIT 1;
    IF refused IS NOT NULL THEN
      RETURN json_build_object('status', array_fill('unknown'::text, ARRAY[appends]),
        'detail', array_fill(refused, ARRAY[appends]));
    END IF;
  END IF;
  -- An append with a call of a projection that is not live is answered so, and left untouched.
  IF call_appends IS NOT NULL THEN
    SELECT coalesce(array_agg(CASE WHEN n.projection IS NULL THEN 'ok' ELSE 'not_live' END ORDER BY a.a), '{}'),
           coalesce(array_agg(n.projection ORDER BY a.a), '{}')
      INTO status, detail
      FROM generate_series(1, appends) a(a)
      LEFT JOIN LATERAL (
        SELECT c.projection FROM unnest(call_appends, call_projections) WITH ORDINALITY c(a, projection, k)
          LEFT JOIN projection_state p ON p.name = c.projection
         WHERE c.a = a.a AND p.status IS DISTINCT FROM 'live'
         ORDER BY c.k LIMIT 1) n ON true;
  END IF;

  -- One new stream, no read model to call (an audit batch: docs/performance.md "Audit batches
  -- append in one statement"): the stream and its events in one statement, when no event id is
  -- stored yet and nobody holds the name. Else nothing was written, and the general path below
  -- answers (wrong expected state, replay, conflict) as for any append.
  IF appends = 1 AND cardinality(request_streams) = 1 AND request_expected[1] = -1 AND events > 0
     AND cardinality(call_appends) = 0 AND status[1] = 'ok' THEN
    WITH made_stream AS (
      INSERT INTO es_streams (stream_name, revision)
      SELECT request_streams[1], events - 1
       WHERE NOT EXISTS (SELECT 1 FROM es_events e WHERE e.event_id = ANY (event_ids))
      ON CONFLICT DO NOTHING
      RETURNING stream_name),
    inserted AS (
      INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
      SELECT u.id, m.stream_name, u.k - 1, u.type, d.value, x.value
        FROM made_stream m
        CROSS JOIN unnest(event_ids, event_types) WITH ORDINALITY u(id, type, k)
        JOIN json_array_elements(data) WITH ORDINALITY d(value, k) ON d.k = u.k
        JOIN jsonb_array_elements(metadata) WITH ORDINALITY x(value, k) ON x.k = u.k
       ORDER BY u.k
      RETURNING event_id, position)
    SELECT array_agg(i.position::text ORDER BY u.k) INTO event_positions
      FROM unnest(event_ids) WITH ORDINALITY u(id, k) JOIN inserted i ON i.event_id = u.id;
    IF event_positions IS NOT NULL THEN
      RETURN json_build_object('commit', pg_current_xact_id()::text, 'status', status, 'detail', detail,
        'outcome', ARRAY['write'], 'revision', ARRAY[(events - 1)::text],
        'commits', ARRAY[pg_current_xact_id()::text], 'positions', ARRAY[event_positions[events]],
        'event_positions', event_positions, 'projections', NULL);
    END IF;
  END IF;

  -- The streams, in name order: the new ones made at the revision their events will give them
  -- (they are ours until commit), the others locked.
  WITH made_streams AS (
    INSERT INTO es_streams (stream_name, revision)
    SELECT r.stream, r.count - 1
      FROM unnest(request_appends, request_streams, request_counts) r(a, stream, count)
     WHERE status[r.a] = 'ok'
     ORDER BY r.stream
    ON CONFLICT DO NOTHING
    RETURNING stream_name)
  SELECT coalesce(array_agg(m.stream_name), '{}') INTO made FROM made_streams m;

  SELECT coalesce(array_agg(l.stream_name), '{}'), coalesce(array_agg(l.revision), '{}')
    INTO locked_streams, locked_revisions
    FROM (SELECT s.stream_name, s.revision FROM es_streams s
           WHERE s.stream_name = ANY (request_streams) AND NOT (s.stream_name = ANY (made))
           ORDER BY s.stream_name FOR UPDATE) l;

  -- Each request's outcome, under the locks: a replay or a conflict by its ids, else its expected
  -- state against its stream's revision (-1: none).
  WITH req AS (
    SELECT r.n, r.a, r.stream, r.expected, r.count,
           (sum(r.count) OVER (ORDER BY r.n) - r.count)::integer AS first,
           coalesce(locked_revisions[array_position(locked_streams, r.stream)], -1) AS actual
      FROM unnest(request_appends, request_streams, request_expected, request_counts)
           WITH ORDINALITY r(a, stream, expected, count, n)),
  -- The stored ids, by one index lookup of the array (usually none), then matched to their requests:
  -- a join of es_events with the events' subscripts could be planned as a scan of the whole log.
  found AS MATERIALIZED (
    SELECT e.event_id, e.stream_name, e.revision FROM es_events e WHERE e.event_id = ANY (event_ids)),
  ids AS (
    SELECT req.n, count(*) AS found, count(DISTINCT f.revision - (u.k - req.first)) AS offsets,
           bool_and(f.stream_name = req.stream) AS same_stream, max(f.revision) AS last_revision,
           (array_agg(f.event_id::text ORDER BY u.k))[1] AS first_found
      FROM found f
      JOIN unnest(event_ids) WITH ORDINALITY u(id, k) ON u.id = f.event_id
      JOIN req ON u.k > req.first AND u.k <= req.first + req.count
     GROUP BY req.n),
  judged AS (
    SELECT req.n, req.count, req.actual, ids.last_revision, ids.first_found,
           CASE
             WHEN status[req.a] <> 'ok' THEN 'skip'
             WHEN ids.found = req.count AND ids.offsets = 1 AND ids.same_stream THEN 'replay'
             WHEN ids.found > 0 THEN 'conflict'
             WHEN NOT (req.expected = -2
                       OR (req.expected = -1 AND req.actual < 0)
                       OR (req.expected = -3 AND req.actual >= 0)
                       OR (req.expected >= 0 AND req.expected = req.actual)) THEN 'wrong'
             WHEN req.count = 0 THEN 'check'
             ELSE 'write' END AS outcome
      FROM req LEFT JOIN ids ON ids.n = req.n)
  SELECT array_agg(j.outcome ORDER BY j.n),
         array_agg(CASE j.outcome WHEN 'replay' THEN j.last_revision
                                  WHEN 'write' THEN j.actual + j.count ELSE j.actual END ORDER BY j.n),
         array_agg(CASE j.outcome WHEN 'conflict' THEN j.first_found WHEN 'wrong' THEN j.n::text END ORDER BY j.n)
    INTO outcome, revision, refusals
    FROM judged j;

  -- Each append's answer: the first of its requests that is refused, in request order.
  SELECT coalesce(array_agg(coalesce(f.outcome, status[a.a]) ORDER BY a.a), '{}'),
         coalesce(array_agg(coalesce(f.detail, detail[a.a]) ORDER BY a.a), '{}')
    INTO status, detail
    FROM generate_series(1, appends) a(a)
    LEFT JOIN LATERAL (
      SELECT outcome[r.n] AS outcome, refusals[r.n] AS detail
        FROM unnest(request_appends) WITH ORDINALITY r(a, n)
       WHERE r.a = a.a AND outcome[r.n] IN ('wrong', 'conflict')
       ORDER BY r.n LIMIT 1) f ON true;

  -- The streams made for appends refused after all are removed again (nothing of them is kept).
  IF cardinality(made) > 0 AND NOT ('ok' = ALL (status)) THEN
    DELETE FROM es_streams s
     USING unnest(request_appends, request_streams) r(a, stream)
     WHERE status[r.a] <> 'ok' AND r.stream = ANY (made) AND s.stream_name = r.stream;
  END IF;

  -- Every event of the appends that are ok, by one statement; the streams they move on by another.
  WITH req AS (
    SELECT r.n, r.a, r.stream, r.count,
           (sum(r.count) OVER (ORDER BY r.n) - r.count)::integer AS first
      FROM unnest(request_appends, request_streams, request_counts) WITH ORDINALITY r(a, stream, count, n)),
  inserted AS (
    INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
    SELECT event_ids[req.first + g.i], req.stream, revision[req.n] - req.count + g.i,
           event_types[req.first + g.i], d.value, m.value
      FROM req
      JOIN LATERAL generate_series(1, req.count) g(i) ON true
      JOIN json_array_elements(data) WITH ORDINALITY d(value, k) ON d.k = req.first + g.i
      JOIN jsonb_array_elements(metadata) WITH ORDINALITY m(value, k) ON m.k = req.first + g.i
     WHERE outcome[req.n] = 'write' AND status[req.a] = 'ok'
     ORDER BY req.n, g.i
    RETURNING event_id, position),
  bumped AS (
    UPDATE es_streams s SET revision = revision[r.n]
      FROM unnest(request_appends, request_streams) WITH ORDINALITY r(a, stream, n)
     WHERE outcome[r.n] = 'write' AND status[r.a] = 'ok' AND NOT (r.stream = ANY (made))
       AND s.stream_name = r.stream)
  SELECT array_agg(i.position::text ORDER BY u.k)
    INTO event_positions
    FROM unnest(event_ids) WITH ORDINALITY u(id, k)
    LEFT JOIN inserted i ON i.event_id = u.id;

  -- Each request's last event: written here, stored (a replay), or the stream's last (a check).
  SELECT array_agg(x.commit ORDER BY x.n), array_agg(x.position ORDER BY x.n)
    INTO commits, positions
    FROM (
      SELECT r.n,
             CASE WHEN outcome[r.n] = 'write' AND status[r.a] = 'ok' THEN pg_current_xact_id()::text
                  ELSE e.transaction_id::text END AS commit,
             CASE WHEN outcome[r.n] = 'write' AND status[r.a] = 'ok'
                  THEN event_positions[(sum(r.count) OVER (ORDER BY r.n))::integer]
                  ELSE e.position::text END AS position
        FROM unnest(request_appends, request_streams, request_counts) WITH ORDINALITY r(a, stream, count, n)
        LEFT JOIN LATERAL (
          SELECT s.transaction_id, s.position FROM es_events s
           WHERE outcome[r.n] IN ('replay', 'check') AND status[r.a] = 'ok'
             AND s.stream_name = r.stream AND s.revision = revision[r.n]) e ON true) x;

  -- The inline read models: each function once, with the rows of every append that wrote events,
  -- in the appends' order (their streams, hence their rows, are distinct).
  FOR call IN
    SELECT c.function, '[' || string_agg(nullif(btrim(substr(x.argument::text, 2,
             length(x.argument::text) - 2)), ''), ',' ORDER BY c.k) || ']' AS argument
      FROM unnest(call_appends, call_functions) WITH ORDINALITY c(a, function, k)
      JOIN json_array_elements(call_arguments) WITH ORDINALITY x(argument, k) ON x.k = c.k
     WHERE status[c.a] = 'ok'
       AND EXISTS (SELECT 1 FROM unnest(request_appends) WITH ORDINALITY r(a, n)
                    WHERE r.a = c.a AND outcome[r.n] = 'write')
     GROUP BY c.function ORDER BY min(c.k)
  LOOP
    IF call.argument <> '[]' THEN
      EXECUTE format('SELECT %I($1::json)', call.function) USING call.argument;
    END IF;
  END LOOP;

  RETURN json_build_object('commit', pg_current_xact_id_if_assigned()::text, 'status', status,
    'detail', detail, 'outcome', outcome, 'revision', revision::text[], 'commits', commits,
    'positions', positions, 'event_positions', event_positions,
    'projections', CASE WHEN call_appends IS NULL
      THEN (SELECT coalesce(json_object_agg(p.name, p.status), '{}') FROM projection_state p) END);
END
$fn$;
