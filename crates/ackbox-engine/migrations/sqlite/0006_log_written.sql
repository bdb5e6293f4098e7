-- Whether the log beside this database (`--store log`) has ever taken a
-- message. The log keeps standard queues' messages; this database keeps
-- their queues. A log found empty where this says it held messages was
-- lost (its directory gone, say): the store refuses to serve those queues
-- as empty rather than quietly lose what it acknowledged.
CREATE TABLE log_written (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    first_sent_at INTEGER NOT NULL
);
