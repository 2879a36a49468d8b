-- The archive: each (day, provider) whose deliveries were written to the
-- archive store (GATEWAY_ARCHIVE_URL) and read back against their manifest,
-- with the manifest's count and SHA-256 and the object's key. Retention,
-- with an archive configured, deletes a day's deliveries only once the day
-- is here.
CREATE TABLE hookgate_archive (
    day         date        NOT NULL,
    provider    text        NOT NULL,
    count       integer     NOT NULL CHECK (count >= 0),
    sha256      text        NOT NULL,
    object      text        NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (day, provider)
);
