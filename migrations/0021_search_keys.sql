-- Search keys: values read from a delivery's payload at ingest, by the JSON
-- paths the configuration file names per provider (search_keys:), so that an
-- operator finds every delivery about cus_123 from an index across the whole
-- retention. One row per (event, key name), written with the event's first
-- receipt in its transaction (received_at is that receipt's), deleted with
-- the event's last receipt. A release before this one writes none: the
-- deliveries it stores are found by q, never by key.
CREATE TABLE hookgate_search_keys (
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    name        text        NOT NULL,
    value       text        NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (provider, delivery_id, name)
);

-- A lookup: the deliveries whose key has a value, newest first, as the list
-- pages them.
CREATE INDEX hookgate_search_keys_lookup ON hookgate_search_keys (name, value, received_at DESC, provider DESC, delivery_id DESC);
