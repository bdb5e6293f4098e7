-- Topics: each one's definition (attributes, tags, subscriptions) as the
-- engine writes it, and a revision every write bumps, so that concurrent
-- changes to one topic are applied one after the other, never lost.
CREATE TABLE topics (
    name TEXT PRIMARY KEY,
    definition TEXT NOT NULL,
    revision BIGINT NOT NULL
);
