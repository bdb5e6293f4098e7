-- FIFO queues. The store orders and locks message groups itself, so it must
-- know each queue's type. Every FIFO mutation holds a transaction-scoped
-- advisory lock on its queue, so nodes see a queue's groups change one
-- transaction at a time, as the embedded store's single writer does.
ALTER TABLE queues ADD COLUMN fifo BOOLEAN NOT NULL DEFAULT FALSE;

-- The deduplication id a FIFO message was sent with.
ALTER TABLE messages ADD COLUMN dedup_id TEXT;

-- A group's messages in send order; partial, so standard queues never pay.
CREATE INDEX messages_by_group ON messages (queue_id, group_id, seq)
    WHERE group_id IS NOT NULL;

-- One row per non-empty group of a FIFO queue: available_at is the later of
-- its head's visibility and the deadline of any lease on its messages.
CREATE TABLE fifo_groups (
    queue_id     BIGINT NOT NULL,
    group_id     TEXT   NOT NULL,
    available_at BIGINT NOT NULL,
    head_seq     BIGINT NOT NULL,
    PRIMARY KEY (queue_id, group_id)
);
CREATE INDEX fifo_groups_by_availability ON fifo_groups (queue_id, available_at, head_seq);

-- The deduplication window: the first send of each deduplication id.
CREATE TABLE fifo_dedup (
    queue_id   BIGINT NOT NULL,
    scope      TEXT   NOT NULL,
    dedup_id   TEXT   NOT NULL,
    message_id TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    sent_at    BIGINT NOT NULL,
    PRIMARY KEY (queue_id, scope, dedup_id)
);
CREATE INDEX fifo_dedup_by_age ON fifo_dedup (sent_at);

-- ReceiveRequestAttemptId: what a receive returned. leases is a JSON array
-- of [seq, receive_count, visible_at].
CREATE TABLE receive_attempts (
    queue_id   BIGINT NOT NULL,
    attempt_id TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    leases     TEXT   NOT NULL,
    PRIMARY KEY (queue_id, attempt_id)
);
CREATE INDEX receive_attempts_by_age ON receive_attempts (created_at);
