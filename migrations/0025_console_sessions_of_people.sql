-- A console session belongs to the admin token's generation (token_id and
-- person NULL), to a personal token, or to a person signed in with OpenID
-- Connect. A personal token's session opens pages only while the token is
-- live (neither revoked nor expired), with the token's role; a person's with
-- the role the identity provider's claim gave at sign-in (person_role), until
-- sign-out or 12 hours idle. A new admin token ends neither. A gateway of the
-- release before reads sessions by generation only, so these (whose
-- generation is NULL) open nothing there: they fail closed.
ALTER TABLE hookgate_console_sessions
    ADD COLUMN token_id text REFERENCES hookgate_tokens (id) ON DELETE CASCADE,
    ADD COLUMN person text,
    ADD COLUMN person_role text CHECK (person_role IN ('viewer', 'operator', 'admin')),
    ADD CONSTRAINT hookgate_console_sessions_one_owner CHECK (token_id IS NULL OR person IS NULL),
    ADD CONSTRAINT hookgate_console_sessions_person_role CHECK ((person IS NULL) = (person_role IS NULL));
