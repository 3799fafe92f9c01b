WITH head AS (
    INSERT INTO "{table}_semaphores" (namespace, name, permits, fence)
    VALUES ($1, $2, $3, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
        ON CONFLICT (namespace, name) DO NOTHING
 RETURNING permits
)
INSERT INTO "{table}_permits" (namespace, name, slot)
SELECT $1, $2, slot FROM head, generate_series(0, $3 - 1) AS slot
    ON CONFLICT DO NOTHING
