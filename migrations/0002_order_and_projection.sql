-- The newest event time each route's target has accepted per entity. A
-- dispatch whose event is older than its route's watermark ends superseded.
CREATE TABLE hookgate_watermarks (
    route       text        NOT NULL,
    entity      text        NOT NULL,
    event_time  timestamptz NOT NULL,
    provider    text        NOT NULL,
    delivery_id text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (route, entity)
);

-- The builtin:stripe-subscriptions projection: the latest known state of each
-- Stripe subscription, from customer.subscription.* events.
CREATE TABLE hookgate_stripe_subscriptions (
    subscription_id text        PRIMARY KEY,
    customer_id     text,
    status          text        NOT NULL,
    event_id        text        NOT NULL,
    event_type      text        NOT NULL,
    event_created   timestamptz NOT NULL,
    updates         integer     NOT NULL DEFAULT 1,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
