-- The embedded store records here whether its log has taken a message
-- (`--store log`); the PostgreSQL store has no log. Kept so that both
-- stores' migrations keep the same numbers.
SELECT 1;
