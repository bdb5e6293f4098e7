-- Queues, their tombstones and their messages.

CREATE TABLE queues (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL UNIQUE,
    attributes       TEXT    NOT NULL,          -- JSON object of wire attribute strings
    tags             TEXT    NOT NULL,          -- JSON object
    created_at       INTEGER NOT NULL,          -- epoch ms
    last_modified_at INTEGER NOT NULL,
    last_purged_at   INTEGER
);

-- Remembers deletions so a name cannot be recreated within the cooldown.
CREATE TABLE deleted_queues (
    name       TEXT    PRIMARY KEY,
    deleted_at INTEGER NOT NULL
);

-- AUTOINCREMENT: a sequence number is never reused, so a stale receipt
-- handle can never name a newer message.
CREATE TABLE messages (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue_id          INTEGER NOT NULL,
    message_id        TEXT    NOT NULL,
    body              TEXT    NOT NULL,
    attributes        TEXT,                     -- JSON object, NULL when none
    md5_of_body       TEXT    NOT NULL,
    md5_of_attributes TEXT,
    trace_header      TEXT,
    group_id          TEXT,
    sender_id         TEXT    NOT NULL,
    sent_at           INTEGER NOT NULL,
    visible_at        INTEGER NOT NULL,         -- delay end or lease deadline
    receive_count     INTEGER NOT NULL DEFAULT 0,
    first_received_at INTEGER
);

-- Receive: the oldest visible messages of a queue. receive_count makes the
-- index covering for the in-flight / delayed split of queue statistics.
CREATE INDEX messages_by_visibility ON messages (queue_id, visible_at, receive_count);
-- Retention: the oldest messages of a queue.
CREATE INDEX messages_by_age ON messages (queue_id, sent_at);
