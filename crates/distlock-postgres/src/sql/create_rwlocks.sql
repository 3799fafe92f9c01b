CREATE TABLE IF NOT EXISTS "{table}_rwlocks" (
    namespace TEXT   NOT NULL,
    name      TEXT   NOT NULL,
    fence     BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
)
