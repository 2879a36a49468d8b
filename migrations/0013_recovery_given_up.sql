-- A GitHub delivery asked for 3 times that never arrived is given up on once:
-- counted, logged and recorded in the audit log the first time a run finds
-- it so, not at every run after.
ALTER TABLE hookgate_recovery_requests ADD COLUMN given_up_at timestamptz;
