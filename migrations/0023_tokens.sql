-- Personal API tokens: each acts as a person (or, made with the admin token,
-- as itself), capped at its role. The token is shown once, when made; only
-- its SHA-256 is stored, so a copy of this table authenticates nobody. A
-- revoked or expired token authenticates nothing from the next request on,
-- on every gateway (each request reads its row). last_used_at moves at most
-- once a minute.
CREATE TABLE hookgate_tokens (
    id           text        PRIMARY KEY,
    name         text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    person       text,
    token_sha256 bytea       NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    revoked_by   text,
    last_used_at timestamptz
);
CREATE INDEX hookgate_tokens_created_at ON hookgate_tokens (created_at DESC, id DESC);

-- A token made or revoked is an audit entry. The check only widens, so a
-- gateway of the release before, which writes neither, runs beside it.
ALTER TABLE hookgate_audit
    DROP CONSTRAINT hookgate_audit_action_check,
    ADD CONSTRAINT hookgate_audit_action_check CHECK (action IN ('pause', 'resume', 'recover', 'retry', 'token_create', 'token_revoke'));
