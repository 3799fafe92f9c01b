CREATE TABLE IF NOT EXISTS "{table}" (
    namespace  TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    owner      TEXT        NULL,
    holder     TEXT        NULL,
    fence      BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NULL,
    lock_key   BIGINT      NULL UNIQUE,
    PRIMARY KEY (namespace, name)
)
