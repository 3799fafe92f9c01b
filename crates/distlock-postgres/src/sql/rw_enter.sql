WITH head AS (
    INSERT INTO "{table}_rwlocks" (namespace, name, fence)
    VALUES ($1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
        ON CONFLICT (namespace, name) DO UPDATE SET fence = "{table}_rwlocks".fence + 1
 RETURNING fence
)
INSERT INTO "{table}_shares" (namespace, name, ticket, mode, owner, granted, expires_at)
SELECT $1, $2, fence, $3, $4, false, now() + interval '1 microsecond' * $5::float8 FROM head
RETURNING ticket
