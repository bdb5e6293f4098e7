-- Dead-lettering: a moved message remembers the queue it died in, so it can
-- report DeadLetterQueueSourceArn and be redriven home; when it was last
-- received; and why it failed, as consumers report with AckBox.NackMessage.
ALTER TABLE messages ADD COLUMN dead_letter_source_arn TEXT;
ALTER TABLE messages ADD COLUMN last_received_at BIGINT;
ALTER TABLE messages ADD COLUMN failure_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN first_failure_at BIGINT;
ALTER TABLE messages ADD COLUMN last_failure_at BIGINT;
ALTER TABLE messages ADD COLUMN last_failure_class TEXT;
ALTER TABLE messages ADD COLUMN last_failure_message TEXT;
