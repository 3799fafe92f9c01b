CREATE TABLE IF NOT EXISTS "{table}_semaphores" (
    namespace TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    permits   INTEGER NOT NULL,
    fence     BIGINT  NOT NULL,
    PRIMARY KEY (namespace, name)
)
