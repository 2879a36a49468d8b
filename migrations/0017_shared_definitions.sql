-- Definitions that more than one query needs, owned by the schema instead of
-- glued into statements as strings. PostgreSQL inlines each view and the SQL
-- function where it is used (none is STRICT, VOLATILE or carries a SET), so a
-- query that names them is planned exactly as if it spelled them out.
--
-- A view's columns are fixed when it is made: a migration that adds a column
-- to hookgate_dispatches and wants it here re-creates the two views.

-- A dispatch with its live state. The row's own state is final once recorded;
-- before that River's job says whether it is running, or was cancelled or
-- discarded outside the worker (River UI, the rescuer). A dispatch whose job
-- was deleted (River UI) will never run: it is cancelled, and so replayable.
-- (The worker records an outcome before River completes the job, so a job
-- that is gone with its row still in progress was deleted.)
CREATE VIEW hookgate_dispatch_states AS
SELECT d.*,
    CASE
        WHEN d.state IN ('succeeded', 'superseded', 'discarded', 'cancelled') THEN d.state
        WHEN d.job_id IS NOT NULL AND j.id IS NULL THEN 'cancelled'
        WHEN j.state = 'running' THEN 'running'
        WHEN j.state IN ('cancelled', 'discarded') THEN j.state::text
        ELSE d.state
    END AS live_state,
    j.errors AS job_errors
FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id;

-- The dispatches still in progress (pending, running or retrying) whose River
-- job is still to run. A dispatch whose job was cancelled, discarded or
-- deleted is not in progress, whatever its row says. The job is read by a
-- scalar subquery, not a join: the same answer (no job reads as NULL, not in
-- progress) at half the planning of the lease statement that holds it.
CREATE VIEW hookgate_live_dispatches AS
SELECT d.*
FROM hookgate_dispatches d
WHERE d.state IN ('pending', 'running', 'retrying')
    AND (SELECT j.state FROM river_job j WHERE j.id = d.job_id) NOT IN ('cancelled', 'discarded', 'completed');

-- The first receipt of an event: what its dispatches send, whichever scope
-- received it first.
CREATE FUNCTION hookgate_first_receipt(event_provider text, event_delivery_id text)
RETURNS SETOF hookgate_receipts LANGUAGE sql STABLE AS $$
    SELECT * FROM hookgate_receipts r
    WHERE r.provider = event_provider AND r.delivery_id = event_delivery_id
    ORDER BY r.received_at, r.scope
    LIMIT 1
$$;

-- The live states of the latest dispatch of each route of an event: what
-- the delivery's summary state is made of.
CREATE FUNCTION hookgate_latest_states(event_provider text, event_delivery_id text)
RETURNS SETOF text LANGUAGE sql STABLE AS $$
    SELECT DISTINCT ON (d.route) d.live_state
    FROM hookgate_dispatch_states d
    WHERE d.provider = event_provider AND d.delivery_id = event_delivery_id
    ORDER BY d.route, d.generation DESC
$$;
