-- Message move tasks (StartMessageMoveTask): durable, so a restart resumes
-- them, and never deleted, so the table is the redrive audit log. Each step
-- moves messages and advances the cursor in one transaction, so a crash never
-- moves a message twice or loses one.
CREATE TABLE move_tasks (
    handle          TEXT    PRIMARY KEY,
    source_queue_id BIGINT  NOT NULL,
    source_arn      TEXT    NOT NULL,
    destination_arn TEXT,                    -- NULL: each message's original source
    rate            BIGINT,                  -- messages per second; NULL: the default
    status          TEXT    NOT NULL,        -- RUNNING, PAUSED, COMPLETED, CANCELLED, FAILED
    started_at      BIGINT  NOT NULL,
    finished_at     BIGINT,
    until_seq       BIGINT  NOT NULL,        -- only messages already there at the start move
    cursor_seq      BIGINT  NOT NULL DEFAULT 0,
    to_move         BIGINT  NOT NULL,
    moved           BIGINT  NOT NULL DEFAULT 0,
    failure_reason  TEXT,
    requested_by    TEXT    NOT NULL,        -- access key, or 'anonymous': the audit trail
    filter_class    TEXT,
    sent_before     BIGINT,
    max_messages    BIGINT,
    sample          BIGINT,
    skipped         BIGINT  NOT NULL DEFAULT 0,
    relapse_base_moved BIGINT NOT NULL DEFAULT 0,
    relapse_base_count BIGINT NOT NULL DEFAULT 0,
    -- Several nodes run a runner for every running task; only the node
    -- holding the lease moves messages, so the rate holds and a dead node's
    -- task is taken over once its lease runs out.
    owner           TEXT,
    owned_until     BIGINT,
    created_order   BIGINT  GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX move_tasks_by_source ON move_tasks (source_arn, started_at);

-- The task that last redrove a message: a message that comes back to the
-- dead-letter queue while that task runs is a relapse (the relapse brake).
ALTER TABLE messages ADD COLUMN redriven_by_task TEXT;
