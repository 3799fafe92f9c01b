CREATE TABLE IF NOT EXISTS "{table}_permits" (
    namespace  TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    slot       INTEGER     NOT NULL,
    owner      TEXT        NULL,
    fence      BIGINT      NULL,
    expires_at TIMESTAMPTZ NULL,
    PRIMARY KEY (namespace, name, slot)
)
