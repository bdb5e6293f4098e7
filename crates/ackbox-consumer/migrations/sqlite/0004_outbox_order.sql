-- The relay publishes in rowid order, the order events were enqueued in, so
-- each message group reaches its queue in the order its events were written.
-- A group's unpublished events, for holding later ones behind a retry (the
-- index carries the rowid).
CREATE INDEX IF NOT EXISTS ackbox_outbox_pending_groups
    ON ackbox_outbox (destination, group_id)
    WHERE published_at IS NULL AND group_id IS NOT NULL;
