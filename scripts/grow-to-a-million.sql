-- grow-to-a-million.sql copies the deliveries a gateway has stored, each
-- copy under new delivery ids and entities, to measure the hot paths on a
-- large database (docs/performance.md, "As the tables grow"): receipts,
-- their search keys, watermarks, and dispatches with their completed River jobs (finalized
-- when the originals were, so within River's hour of completed jobs if the
-- originals are). Run it against a stopped load, on a database whose
-- deliveries have all been forwarded (it refuses otherwise):
--
--   psql -v copies=49 -f scripts/grow-to-a-million.sql "$DATABASE_URL"
--
-- 49 copies of a 15 s run at 16 senders (about 23,000 deliveries) make
-- about 1.1 million. It never changes a row it did not insert; run twice, it
-- fails on the first copy's ids and changes nothing.
\set ON_ERROR_STOP on
-- hookgate's tables live in the schema GATEWAY_DATABASE_SCHEMA names
-- (hookgate by default): psql -v schema=NAME for another.
\if :{?schema}
\else
\set schema hookgate
\endif
SET search_path = :"schema", public;
\if :{?copies}
\else
\set copies 49
\endif
DO $$ BEGIN
  IF EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled')) THEN
    RAISE EXCEPTION 'grow-to-a-million: River jobs are still waiting or running; let the gateway forward everything first (gateway bench waits for that)';
  END IF;
END $$;
BEGIN;
CREATE TEMP TABLE copies ON COMMIT DROP AS SELECT generate_series(1, :copies) AS n;
INSERT INTO hookgate_receipts (provider, scope, delivery_id, event, entity, event_time, content_type, headers, body, body_sha256, received_at, expires_at)
  SELECT provider, scope, delivery_id || '-' || n, event, entity || '-' || n, event_time, content_type, headers, body, body_sha256,
    received_at - make_interval(secs => n * 20), expires_at
  FROM hookgate_receipts, copies;
-- Each copy's search keys take its original's values, at its received_at.
INSERT INTO hookgate_search_keys (provider, delivery_id, name, value, received_at)
  SELECT provider, delivery_id || '-' || n, name, value, received_at - make_interval(secs => n * 20)
  FROM hookgate_search_keys, copies;
INSERT INTO hookgate_watermarks (route, entity, event_time, provider, delivery_id, updated_at)
  SELECT route, entity || '-' || n, event_time, provider, delivery_id || '-' || n, updated_at
  FROM hookgate_watermarks, copies;
WITH j AS (
  INSERT INTO river_job (args, attempt, attempted_at, attempted_by, created_at, errors, finalized_at, kind, max_attempts,
      metadata, priority, queue, state, scheduled_at, tags, unique_key, unique_states)
  SELECT jsonb_set(args, '{delivery_id}', to_jsonb((args->>'delivery_id') || '-' || n)), attempt, attempted_at, attempted_by,
    created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags,
    CASE WHEN unique_key IS NULL THEN NULL ELSE sha256(unique_key || int4send(n)) END, unique_states
  FROM river_job, copies WHERE kind = 'hookgate_dispatch' AND state = 'completed'
  RETURNING id, args, created_at)
-- Each copy's dispatch takes its original's state and attempts (a copy's id
-- is its original's with "-n" appended).
INSERT INTO hookgate_dispatches (provider, delivery_id, route, generation, state, attempts, created_at, updated_at, job_id)
  SELECT j.args->>'provider', j.args->>'delivery_id', j.args->>'route', (j.args->>'generation')::int, d.state, d.attempts,
    j.created_at, j.created_at, j.id
  FROM j JOIN hookgate_dispatches d ON d.provider = j.args->>'provider'
    AND d.delivery_id = regexp_replace(j.args->>'delivery_id', '-[0-9]+$', '')
    AND d.route = j.args->>'route' AND d.generation = (j.args->>'generation')::int;
COMMIT;
VACUUM ANALYZE;
SELECT (SELECT count(*) FROM hookgate_receipts) AS receipts, (SELECT count(*) FROM hookgate_dispatches) AS dispatches,
  (SELECT count(*) FROM hookgate_watermarks) AS watermarks, (SELECT count(*) FROM river_job) AS river_jobs,
  pg_size_pretty(pg_database_size(current_database())) AS size;
