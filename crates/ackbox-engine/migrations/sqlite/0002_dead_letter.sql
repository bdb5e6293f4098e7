-- Dead-lettering: a moved message remembers the queue it died in, so it can
-- report DeadLetterQueueSourceArn and be redriven home.
ALTER TABLE messages ADD COLUMN dead_letter_source_arn TEXT;
