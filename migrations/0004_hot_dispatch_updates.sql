-- A dispatch row's state changes on every outcome. With no index on state,
-- those updates are HOT (no index entries written, cheaper to vacuum). The
-- reconcile job finds its rows from River's side instead (river_job by state,
-- then hookgate_dispatches by job_id).
DROP INDEX hookgate_dispatches_unfinished;
