-- Routes owned by the database (GATEWAY_ROUTES_FROM=database): each route
-- as the configuration file has it, as JSON, in the order first made.
-- version moves with every change, so that each gateway, reading it every
-- 2 s, puts a change in force within seconds; seeded_at says the configured
-- routes seeded the table once (they never do again). A deleted route stays
-- as it was, deleted_at set: its dispatches already made finish with it,
-- on every gateway and after a restart.
CREATE TABLE hookgate_live_routes (
    name       text        PRIMARY KEY,
    spec       jsonb       NOT NULL,
    position   bigint      GENERATED ALWAYS AS IDENTITY,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL,
    deleted_at timestamptz
);
CREATE TABLE hookgate_live_routes_state (
    one       boolean     PRIMARY KEY DEFAULT true CHECK (one),
    version   bigint      NOT NULL DEFAULT 0,
    seeded_at timestamptz
);
INSERT INTO hookgate_live_routes_state DEFAULT VALUES;

-- A route put or deleted is an audit entry with the route before and after
-- (null for none). The check only widens, and the columns are nullable, so
-- the release before runs beside it.
ALTER TABLE hookgate_audit
    ADD COLUMN before jsonb,
    ADD COLUMN after jsonb,
    DROP CONSTRAINT hookgate_audit_action_check,
    ADD CONSTRAINT hookgate_audit_action_check CHECK (action IN ('pause', 'resume', 'recover', 'retry', 'token_create', 'token_revoke', 'route_put', 'route_delete'));
