-- A receipt's key becomes (provider, delivery_id, scope): its prefix is the
-- event, so one index serves both the key (ON CONFLICT on insert) and every
-- lookup of an event's receipts (the first receipt of a dispatch, replays),
-- and each receipt writes one index entry fewer.
CREATE UNIQUE INDEX hookgate_receipts_key ON hookgate_receipts (provider, delivery_id, scope);
ALTER TABLE hookgate_receipts DROP CONSTRAINT hookgate_receipts_pkey,
    ADD CONSTRAINT hookgate_receipts_pkey PRIMARY KEY USING INDEX hookgate_receipts_key;
DROP INDEX hookgate_receipts_event;
