-- A receipt's key outlives its body: when retention deletes a receipt, its
-- provider, scope, delivery id, event and body hash are kept here until
-- received_at + GATEWAY_ID_RETENTION, so that a captured delivery sent again
-- after its body is gone answers duplicate (the same body) or 409 (another),
-- and dispatches nothing. GitHub signs no timestamp: this is what stops a
-- replayed capture. Ingest reads it by primary key for each new receipt.
CREATE TABLE hookgate_expired_ids (
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    scope       text        NOT NULL,
    event       text        NOT NULL,
    body_sha256 bytea       NOT NULL,
    received_at timestamptz NOT NULL,
    expired_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (provider, delivery_id, scope)
);
CREATE INDEX hookgate_expired_ids_expires_at ON hookgate_expired_ids (expires_at);
