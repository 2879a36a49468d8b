-- Listeners: people's machines receiving a listen route's dispatches over
-- Server-Sent Events (GET /admin/listen/{route}). One row per open stream,
-- its seen_at moved every few seconds while it is open; a row whose seen_at
-- is old belongs to a gateway that died with the stream open.
CREATE TABLE hookgate_listeners (
    stream       text        PRIMARY KEY,
    route        text        NOT NULL,
    actor        text        NOT NULL,
    connected_at timestamptz NOT NULL DEFAULT now(),
    seen_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hookgate_listeners_route ON hookgate_listeners (route, seen_at);

-- Offers: one attempt of a listen route's dispatch (its River job, whose id
-- is the dispatch_id listeners see), made by the dispatch's worker on any
-- gateway and sent on one stream (on any gateway) that takes it. The
-- listener's answer (status) ends it; so does its stream closing before the
-- answer (closed_at), after which the worker withdraws it (withdrawn_at)
-- and the dispatch waits for the next listener. seq is the event id a stream
-- resumes after (Last-Event-ID). A dispatch's rows are deleted with its
-- outcome.
CREATE TABLE hookgate_listen_offers (
    seq          bigserial   PRIMARY KEY,
    route        text        NOT NULL,
    job_id       bigint      NOT NULL,
    provider     text        NOT NULL,
    delivery_id  text        NOT NULL,
    generation   integer     NOT NULL,
    attempt      integer     NOT NULL,
    stream       text,
    sent_at      timestamptz,
    closed_at    timestamptz,
    withdrawn_at timestamptz,
    status       integer,
    answered_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
-- What a stream takes next: the route's offers not yet sent nor ended.
CREATE INDEX hookgate_listen_offers_open ON hookgate_listen_offers (route, seq) WHERE status IS NULL AND withdrawn_at IS NULL;
CREATE INDEX hookgate_listen_offers_job ON hookgate_listen_offers (job_id);
