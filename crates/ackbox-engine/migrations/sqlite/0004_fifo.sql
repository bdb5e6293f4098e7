-- FIFO queues. The store orders and locks message groups itself, so it must
-- know each queue's type.
ALTER TABLE queues ADD COLUMN fifo INTEGER NOT NULL DEFAULT 0;

-- The deduplication id a FIFO message was sent with (explicit or the body's
-- SHA-256), reported as the MessageDeduplicationId system attribute.
ALTER TABLE messages ADD COLUMN dedup_id TEXT;

-- A group's messages in send order. Partial: standard-queue messages without
-- a group never pay for it.
CREATE INDEX messages_by_group ON messages (queue_id, group_id, seq)
    WHERE group_id IS NOT NULL;

-- One row per non-empty group of a FIFO queue. available_at is when the group
-- may deliver next: the later of its head's visibility and the deadline of any
-- lease on its messages, so a receive finds deliverable groups by one index
-- range however many groups are blocked.
CREATE TABLE fifo_groups (
    queue_id     INTEGER NOT NULL,
    group_id     TEXT    NOT NULL,
    available_at INTEGER NOT NULL,
    head_seq     INTEGER NOT NULL,
    PRIMARY KEY (queue_id, group_id)
) WITHOUT ROWID;
CREATE INDEX fifo_groups_by_availability ON fifo_groups (queue_id, available_at, head_seq);

-- The deduplication window: the first send of each deduplication id, kept
-- for five minutes whatever happens to the message; PurgeQueue clears it.
-- scope is '' for queue-wide deduplication, else the message group.
CREATE TABLE fifo_dedup (
    queue_id   INTEGER NOT NULL,
    scope      TEXT    NOT NULL,
    dedup_id   TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    sent_at    INTEGER NOT NULL,
    PRIMARY KEY (queue_id, scope, dedup_id)
) WITHOUT ROWID;
CREATE INDEX fifo_dedup_by_age ON fifo_dedup (sent_at);

-- ReceiveRequestAttemptId: what a receive returned, so a retry within five
-- minutes returns the same messages and handles. leases is a JSON array of
-- [seq, receive_count, visible_at].
CREATE TABLE receive_attempts (
    queue_id   INTEGER NOT NULL,
    attempt_id TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    leases     TEXT    NOT NULL,
    PRIMARY KEY (queue_id, attempt_id)
) WITHOUT ROWID;
CREATE INDEX receive_attempts_by_age ON receive_attempts (created_at);
