-- Message move tasks (StartMessageMoveTask): durable, so a restart resumes
-- them, and never deleted, so the table is the redrive audit log. Each step moves messages and advances the cursor in one transaction,
-- so a crash never moves a message twice or loses one.
CREATE TABLE move_tasks (
    handle          TEXT    PRIMARY KEY,
    source_queue_id INTEGER NOT NULL,
    source_arn      TEXT    NOT NULL,
    destination_arn TEXT,                    -- NULL: each message's original source
    rate            INTEGER,                 -- messages per second; NULL: the default
    status          TEXT    NOT NULL,        -- RUNNING, PAUSED, COMPLETED, CANCELLED, FAILED
    started_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    until_seq       INTEGER NOT NULL,        -- only messages already there at the start move
    cursor_seq      INTEGER NOT NULL DEFAULT 0,
    to_move         INTEGER NOT NULL,
    moved           INTEGER NOT NULL DEFAULT 0,
    failure_reason  TEXT,
    requested_by    TEXT    NOT NULL,        -- access key, or 'anonymous': the audit trail
    filter_class    TEXT,                    -- only messages whose last failure class is this
    sent_before     INTEGER,                 -- only messages sent at or before this instant
    max_messages    INTEGER,                 -- stop after moving this many
    sample          INTEGER,                 -- pause (PAUSED) after moving this many; cleared on resume
    skipped         INTEGER NOT NULL DEFAULT 0,
    -- The relapse brake judges what happened since the last resume.
    relapse_base_moved INTEGER NOT NULL DEFAULT 0,
    relapse_base_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX move_tasks_by_source ON move_tasks (source_arn, started_at);

-- The task that last redrove a message: a message that comes back to the
-- dead-letter queue while that task runs is a relapse (the relapse brake).
ALTER TABLE messages ADD COLUMN redriven_by_task TEXT;
