CREATE TABLE IF NOT EXISTS "{table}_shares" (
    namespace  TEXT        NOT NULL,
    name       TEXT        NOT NULL,
    ticket     BIGINT      NOT NULL,
    mode       TEXT        NOT NULL CHECK (mode IN ('read', 'write')),
    owner      TEXT        NOT NULL,
    granted    BOOLEAN     NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, name, ticket)
)
