-- Recovery through the providers' APIs. A checkpoint is where the next run of
-- one source (a GitHub hook, or Stripe's events) starts listing; a request is
-- one GitHub delivery asked for again: attempts counts the asks, ever, across
-- processes and restarts, and the row is the claim that keeps two processes
-- from asking for the same GUID at once.
CREATE TABLE hookgate_recovery_checkpoints (
    source     text        PRIMARY KEY,
    checkpoint timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE hookgate_recovery_requests (
    provider     text        NOT NULL,
    scope        text        NOT NULL,
    delivery_id  text        NOT NULL,
    attempts     integer     NOT NULL CHECK (attempts BETWEEN 1 AND 3),
    delivered_at timestamptz NOT NULL,
    asked_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, scope, delivery_id)
);
CREATE INDEX hookgate_recovery_requests_delivered_at ON hookgate_recovery_requests (delivered_at);
