-- Side-effect records: a call outside the database (a payment gateway, an
-- email service) recorded PENDING before it is made, SUCCEEDED with the
-- provider's reference after, UNKNOWN when its outcome is ambiguous.
CREATE TABLE IF NOT EXISTS ackbox_effects (
    effect_key      TEXT    PRIMARY KEY,
    idempotency_key TEXT    NOT NULL,  -- sent to the provider on every attempt
    state           TEXT    NOT NULL,  -- PENDING, SUCCEEDED, UNKNOWN, RETRY, FAILED
    result          TEXT,              -- the provider's reference
    attempts        INTEGER NOT NULL,
    last_error      TEXT,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL
);
CREATE INDEX IF NOT EXISTS ackbox_effects_by_state ON ackbox_effects (state, updated_at);

-- Version-guarded projections: the newest version applied per aggregate.
CREATE TABLE IF NOT EXISTS ackbox_projection_versions (
    projection   TEXT   NOT NULL,
    aggregate_id TEXT   NOT NULL,
    version      BIGINT NOT NULL,
    PRIMARY KEY (projection, aggregate_id)
);
