CREATE TABLE IF NOT EXISTS "{values}" (
    resource   BYTEA       NOT NULL PRIMARY KEY,
    value      BYTEA       NOT NULL,
    expires_at TIMESTAMPTZ NULL
)
