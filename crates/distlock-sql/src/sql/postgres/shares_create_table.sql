CREATE TABLE IF NOT EXISTS "{table}" (
    namespace  TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    slot       BIGINT      NOT NULL,
    permits    BIGINT      NULL,
    owner      TEXT        NULL,
    fence      BIGINT      NOT NULL DEFAULT 0,
    expires_at TIMESTAMPTZ NULL,
    PRIMARY KEY (namespace, name, slot)
)
