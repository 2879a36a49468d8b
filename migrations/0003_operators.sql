-- The River job that carries each dispatch, so operators see its live state
-- (running, or cancelled from River UI) before the dispatch row records it.
ALTER TABLE hookgate_dispatches ADD COLUMN job_id bigint;
CREATE INDEX hookgate_dispatches_job_id ON hookgate_dispatches (job_id);
CREATE INDEX hookgate_dispatches_unfinished ON hookgate_dispatches (job_id)
    WHERE state IN ('pending', 'running', 'retrying');

-- The replay log: every single and bulk replay, who asked, why, and what it did.
CREATE TABLE hookgate_replays (
    replay_id   text        PRIMARY KEY,
    actor       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    filter      jsonb       NOT NULL,
    force       boolean     NOT NULL,
    reason      text,
    deliveries  integer     NOT NULL DEFAULT 0,
    dispatches  integer     NOT NULL DEFAULT 0,
    state       text        NOT NULL CHECK (state IN ('running', 'done')),
    -- where a bulk replay's next batch starts: (received_at, provider, delivery_id) of the last delivery done
    cursor      jsonb
);
CREATE INDEX hookgate_replays_created_at ON hookgate_replays (created_at DESC);

-- Idempotency records of operator requests: one per (scope, operation, key).
-- Only answered 2xx requests are kept; a request in flight holds an advisory
-- lock on its key instead of a row, so a failed or crashed one frees the key.
CREATE TABLE hookgate_idempotency (
    scope           text        NOT NULL,
    operation       text        NOT NULL,
    key             text        NOT NULL,
    request_hash    bytea       NOT NULL,
    state           text        NOT NULL CHECK (state IN ('pending', 'completed')),
    response_status integer,
    response_body   bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (scope, operation, key)
);
CREATE INDEX hookgate_idempotency_expires_at ON hookgate_idempotency (expires_at);

-- The newest 1,000 rejected ingest requests, as a ring: slot = seq % 1000, so
-- a flood of bad requests overwrites rows and never grows the table.
CREATE SEQUENCE hookgate_rejection_seq;
CREATE TABLE hookgate_rejections (
    slot         integer     PRIMARY KEY CHECK (slot >= 0 AND slot < 1000),
    seq          bigint      NOT NULL,
    at           timestamptz NOT NULL,
    provider     text        NOT NULL,
    status       integer     NOT NULL,
    reason       text        NOT NULL,
    remote_addr  text        NOT NULL,
    header_names text[]      NOT NULL
);
