-- A purge deletes a bounded number of messages at once; when the queue held
-- more, it marks the newest sequence number it covers and the sweeper drops
-- the queue's messages up to the mark in chunks (SQS: "may take up to 60
-- seconds"). NULL when no purge is unfinished.
ALTER TABLE queues ADD COLUMN purged_through_seq BIGINT;
