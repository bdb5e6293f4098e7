-- Fair queues: a receive on a standard queue counts each tenant's
-- (MessageGroupId's) in-flight messages to find the noisy ones. Only
-- received messages with a group are in this index: a send never writes
-- it, and a queue whose messages have no group pays one empty probe.
CREATE INDEX messages_in_flight_by_group ON messages (queue_id, visible_at, group_id)
    WHERE group_id IS NOT NULL AND receive_count > 0;
