-- An operator's retry now (of a route's or a delivery's retrying dispatches)
-- is an audit entry too: action 'retry'. The check only widens, so a gateway
-- of the release before, which never writes 'retry', runs beside it.
ALTER TABLE hookgate_audit
    DROP CONSTRAINT hookgate_audit_action_check,
    ADD CONSTRAINT hookgate_audit_action_check CHECK (action IN ('pause', 'resume', 'recover', 'retry'));
