-- Schema errors: why a delivery's payload failed the JSON Schema of its event
-- (the configuration file's schemas:). Such a delivery is stored and
-- acknowledged but dispatched to no route; its state is invalid while its
-- row is here. A forced replay that finds the payload valid again deletes
-- the row in the transaction that creates the dispatches. One row per event,
-- deleted with the event's last receipt. A release before this one checks
-- no schema and writes none.
CREATE TABLE hookgate_schema_errors (
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    schema      text        NOT NULL,
    path        text        NOT NULL,
    rule        text        NOT NULL,
    message     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, delivery_id)
);
