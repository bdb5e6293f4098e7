-- The transactional outbox: events written in the application's transaction,
-- published by a relay afterwards. event_id is stable: it becomes the
-- MessageDeduplicationId (FIFO) and the ackbox.event_id attribute, so a
-- second publication of one event is deduplicated downstream.
CREATE TABLE IF NOT EXISTS ackbox_outbox (
    event_id        TEXT   PRIMARY KEY,
    destination     TEXT   NOT NULL,   -- queue URL
    body            TEXT   NOT NULL,
    attributes      TEXT   NOT NULL,   -- JSON object of string message attributes
    group_id        TEXT,
    created_at      INTEGER NOT NULL,   -- epoch ms
    published_at    INTEGER,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT
);
CREATE INDEX IF NOT EXISTS ackbox_outbox_pending ON ackbox_outbox (next_attempt_at, created_at)
    WHERE published_at IS NULL;
-- Published rows are kept a while (for people reading the table), then purged.
CREATE INDEX IF NOT EXISTS ackbox_outbox_published ON ackbox_outbox (published_at)
    WHERE published_at IS NOT NULL;
