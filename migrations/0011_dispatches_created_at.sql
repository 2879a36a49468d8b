-- The console's charts read a day of dispatches by when they were created
-- (never before their event's first receipt): an index spares them a scan of
-- every dispatch ever kept.
CREATE INDEX hookgate_dispatches_created_at ON hookgate_dispatches (created_at);
