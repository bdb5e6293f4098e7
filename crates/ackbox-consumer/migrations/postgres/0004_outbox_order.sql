-- The order events were enqueued in: the relay publishes by it, so each
-- message group reaches its queue in the order its events were written.
ALTER TABLE ackbox_outbox ADD COLUMN IF NOT EXISTS position BIGSERIAL;
CREATE INDEX IF NOT EXISTS ackbox_outbox_pending_in_order ON ackbox_outbox (position)
    WHERE published_at IS NULL;
-- A group's unpublished events, for holding later ones behind a retry.
CREATE INDEX IF NOT EXISTS ackbox_outbox_pending_groups
    ON ackbox_outbox (destination, group_id, position)
    WHERE published_at IS NULL AND group_id IS NOT NULL;
