CREATE TABLE IF NOT EXISTS "{table}_hw" (
    namespace TEXT   NOT NULL PRIMARY KEY,
    floor     BIGINT NOT NULL
)
