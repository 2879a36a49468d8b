-- A console session belongs to the admin token that opened it, for good.
-- A gateway that starts with a token other than the one recorded last records
-- a new generation (the token's SHA-256, never the token) and ends the
-- sessions of every other generation; a session opens a page only in a
-- gateway of its own generation. Turning a token back starts yet another
-- generation, so the sessions it had before stay dead. (actor, 4 bytes of the
-- token's digest, came back to life with the token, and could collide.)
-- actor is no longer written; a session of an earlier release has no
-- generation and opens nothing.
CREATE TABLE hookgate_admin_token_generations (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_sha256 bytea       NOT NULL CHECK (length(token_sha256) = 32),
    started_at   timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE hookgate_console_sessions
    ALTER COLUMN actor DROP NOT NULL,
    ADD COLUMN generation bigint REFERENCES hookgate_admin_token_generations (id) ON DELETE CASCADE;
