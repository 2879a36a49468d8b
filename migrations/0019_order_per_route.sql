-- Order per route (a route's order: latest, all or none, and its
-- order_window).

-- The delivery whose event superseded a dispatch: a superseded dispatch
-- names the newer event its route's target had accepted.
ALTER TABLE hookgate_dispatches ADD COLUMN superseded_by text;

-- The view of a dispatch with its live state (0017) fixed its columns when
-- it was made: replaced by the same view with the new column at its end, so
-- that the release before, which reads the view, finds it as it was.
CREATE OR REPLACE VIEW hookgate_dispatch_states AS
SELECT d.provider, d.delivery_id, d.route, d.generation, d.state, d.attempts, d.last_error,
    d.created_at, d.updated_at, d.job_id,
    CASE
        WHEN d.state IN ('succeeded', 'superseded', 'discarded', 'cancelled') THEN d.state
        WHEN d.job_id IS NOT NULL AND j.id IS NULL THEN 'cancelled'
        WHEN j.state = 'running' THEN 'running'
        WHEN j.state IN ('cancelled', 'discarded') THEN j.state::text
        ELSE d.state
    END AS live_state,
    j.errors AS job_errors,
    d.superseded_by
FROM hookgate_dispatches d LEFT JOIN river_job j ON j.id = d.job_id;

-- The turns waited for on routes that hand an entity's events oldest first
-- (order all, or an order_window): one row per dispatch of an event that
-- names an entity and a time, inserted with the dispatch and deleted with
-- its outcome. A dispatch takes a free lease (or entity lock) of such a route
-- only when no live dispatch of an older event of its entity waits here.
-- Only such routes write rows, so the table holds what waits, no history.
CREATE TABLE hookgate_turns (
    route       text        NOT NULL,
    entity      text        NOT NULL,
    event_time  timestamptz NOT NULL,
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    generation  integer     NOT NULL,
    PRIMARY KEY (route, entity, event_time, provider, delivery_id, generation)
);

-- Whether a live dispatch of an event of the entity older than event_time
-- waits for its turn on the route. A row whose dispatch ended without
-- deleting it (retention, a cancelled job) is not live and does not count.
CREATE FUNCTION hookgate_older_waiting(turn_route text, turn_entity text, turn_event_time timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM hookgate_turns t
        JOIN hookgate_live_dispatches d ON d.provider = t.provider AND d.delivery_id = t.delivery_id
            AND d.route = t.route AND d.generation = t.generation
        WHERE t.route = turn_route AND t.entity = turn_entity AND t.event_time < turn_event_time)
$$;
