-- Each configured route's state shared by all gateway processes: whether an
-- operator paused it, and its circuit (consecutive failed attempts; open
-- until a time; a probe attempt running until a time). A row is created when
-- a gateway starts with the route configured, and kept when the route is
-- removed (a route that comes back comes back paused if it was).
CREATE TABLE hookgate_routes (
    name            text        PRIMARY KEY,
    paused_at       timestamptz,
    paused_by       text,
    pause_reason    text,
    failures        integer     NOT NULL DEFAULT 0,
    open_until      timestamptz,
    probe_until     timestamptz,
    last_success_at timestamptz,
    last_failure_at timestamptz,
    last_error      text
);

-- A route's rate limit, all processes together: a ring of the start times of
-- its last N attempts (N = size). The next slot (next) holds the oldest; an
-- attempt may start only when that one is older than the window, so no window
-- ever holds more than N starts.
CREATE TABLE hookgate_route_rates (
    route text    PRIMARY KEY,
    size  integer NOT NULL,
    next  integer NOT NULL DEFAULT 0
);
CREATE TABLE hookgate_rate_slots (
    route text        NOT NULL,
    slot  integer     NOT NULL,
    at    timestamptz NOT NULL,
    PRIMARY KEY (route, slot)
);

-- Attempts per route and minute, added up by every process once a second:
-- the operators' succeeded_5m and failed_5m, and last_success_at. Kept a day.
CREATE TABLE hookgate_route_minutes (
    route     text        NOT NULL,
    minute    timestamptz NOT NULL,
    succeeded bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (route, minute)
);

-- What operators did to routes (pause, resume) and, later, recoveries.
-- Replays are in hookgate_replays; GET /admin/audit shows both.
CREATE TABLE hookgate_audit (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    action      text        NOT NULL CHECK (action IN ('pause', 'resume', 'recover')),
    route       text,
    provider    text,
    delivery_id text,
    reason      text
);
CREATE INDEX hookgate_audit_at ON hookgate_audit (at DESC, id DESC);
