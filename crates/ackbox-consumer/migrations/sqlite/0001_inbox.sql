-- The inbox: one row per effect a consumer applied, written in the same
-- transaction as the effect. (consumer, effect_key) is the claim.
CREATE TABLE IF NOT EXISTS ackbox_inbox (
    consumer     TEXT   NOT NULL,
    effect_key   TEXT   NOT NULL,
    fingerprint  TEXT   NOT NULL,   -- SHA-256 of the body: the same key with another payload is a bug
    message_id   TEXT   NOT NULL,
    processed_at INTEGER NOT NULL,   -- epoch ms
    expires_at   INTEGER NOT NULL,   -- epoch ms; past the queue's redelivery horizon
    result       TEXT,              -- what the handler asked to return on replays
    PRIMARY KEY (consumer, effect_key)
);
CREATE INDEX IF NOT EXISTS ackbox_inbox_by_expiry ON ackbox_inbox (expires_at);
