-- River indexes every job's args and metadata with a GIN index. hookgate
-- never searches jobs by either (its queries read args->>'route', which those
-- indexes do not serve), yet every job is inserted, fetched, completed and
-- deleted through them: a state change is never a HOT update (state is
-- indexed), so each writes both. Measured (docs/performance.md): without them
-- a delivery costs about a tenth less CPU at 16 senders (a few percent at
-- 64). A service that lists its own River
-- jobs by args or metadata can create them again; hookgate does not drop
-- them twice. The River client leaves them out of its reindexing
-- (package schema, RiverIndexesDropped).
DROP INDEX IF EXISTS river_job_args_index;
DROP INDEX IF EXISTS river_job_metadata_index;
