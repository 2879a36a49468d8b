-- A console session opened with a personal token belongs to that token: it
-- opens pages only while the token is live (neither revoked nor expired),
-- with the token's role, and a new admin token does not end it. A session of
-- the admin token keeps token_id NULL and its generation. A gateway of the
-- release before reads sessions by generation only, so a token's session
-- (whose generation is NULL) opens nothing there: it fails closed.
ALTER TABLE hookgate_console_sessions
    ADD COLUMN token_id text REFERENCES hookgate_tokens (id) ON DELETE CASCADE;
