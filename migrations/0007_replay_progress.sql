-- How many of a replay's deliveries have been handled so far, so that a bulk
-- replay's progress can be shown (GET /admin/replays/{replay_id}).
ALTER TABLE hookgate_replays ADD COLUMN done integer NOT NULL DEFAULT 0;
UPDATE hookgate_replays SET done = deliveries WHERE state = 'done';
