-- A receipt is the proof that a verified delivery was received, written before
-- any side effect. One per (provider, scope, delivery id): GitHub sends one
-- event's GUID to every hook, so its scope is the hook id.
CREATE TABLE hookgate_receipts (
    provider     text        NOT NULL,
    scope        text        NOT NULL,
    delivery_id  text        NOT NULL,
    event        text        NOT NULL,
    entity       text,
    event_time   timestamptz,
    content_type text        NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    body         bytea       NOT NULL,
    body_sha256  bytea       NOT NULL CHECK (length(body_sha256) = 32),
    received_at  timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (provider, scope, delivery_id)
);

CREATE INDEX hookgate_receipts_event ON hookgate_receipts (provider, delivery_id);
CREATE INDEX hookgate_receipts_received_at ON hookgate_receipts (received_at DESC);
CREATE INDEX hookgate_receipts_expires_at ON hookgate_receipts (expires_at);

-- A dispatch is one route's handling of one event (provider, delivery id), in a
-- generation: 1 for the first, +1 for each replay. Its primary key is the
-- inbox: however many hooks delivered the event, a route gets it once per
-- generation. Each row has exactly one River job.
CREATE TABLE hookgate_dispatches (
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    route       text        NOT NULL,
    generation  integer     NOT NULL CHECK (generation > 0),
    state       text        NOT NULL DEFAULT 'pending' CHECK (state IN
                    ('pending', 'running', 'succeeded', 'retrying', 'discarded', 'superseded', 'cancelled')),
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, delivery_id, route, generation)
);
