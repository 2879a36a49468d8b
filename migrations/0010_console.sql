-- The operator console's sessions: a browser signs in with the admin token
-- and then carries only a random session id in a cookie. The id is stored as
-- its SHA-256 (a copy of this table opens no session); actor ties the session
-- to the token it signed in with, so that a new GATEWAY_ADMIN_TOKEN ends every
-- session of the old one. A session ends 12 hours after it was last seen.
CREATE TABLE hookgate_console_sessions (
    id_sha256  bytea       PRIMARY KEY CHECK (length(id_sha256) = 32),
    csrf       text        NOT NULL,
    actor      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hookgate_console_sessions_seen_at ON hookgate_console_sessions (seen_at);
