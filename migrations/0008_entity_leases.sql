-- Which dispatch of a route is handling an entity now. An ordered forward
-- takes its entity's lease before it reads the watermark, holds no database
-- connection while the target answers, and gives the lease back in the same
-- transaction that records its outcome and moves the watermark. A lease
-- outlives a process that died: an older event then waits until the holder's
-- dispatch has ended, so it never goes out after a newer one the target may
-- already have accepted.
CREATE TABLE hookgate_leases (
    route       text        NOT NULL,
    entity      text        NOT NULL,
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    generation  integer     NOT NULL,
    event_time  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (route, entity)
);
