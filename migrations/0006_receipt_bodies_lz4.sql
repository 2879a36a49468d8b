-- Bodies are compressed with lz4 rather than pglz: on payloads like real ones
-- (about 6 KB of JSON with hashes and URLs) ingest measured about a tenth more
-- deliveries per second, most of pglz's compression time being saved. A server
-- built without lz4 (or older than PostgreSQL 14) keeps pglz; rows already
-- stored keep the compression they were written with.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE hookgate_receipts ALTER COLUMN body SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    RAISE NOTICE 'hookgate: lz4 is not available here; receipt bodies stay compressed with pglz';
END
$$;
