-- The last time each notification was sent each event of each route (or
-- provider): a notification sends one at most once per 10 minutes, across
-- every gateway on the database. A send claims its row first, in one
-- statement, so that two gateways never both send.
CREATE TABLE hookgate_notifications_sent (
    notification text        NOT NULL,
    event        text        NOT NULL,
    subject      text        NOT NULL,
    sent_at      timestamptz NOT NULL,
    PRIMARY KEY (notification, event, subject)
);
