WITH head AS (
    INSERT INTO "{table}_semaphores" (namespace, name, permits, fence)
    VALUES ($1, $2, $3, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
        ON CONFLICT (namespace, name) DO NOTHING
 RETURNING permits
), in_use AS (
    SELECT permits FROM head
     UNION ALL
    SELECT permits FROM "{table}_semaphores" WHERE namespace = $1 AND name = $2
)
INSERT INTO "{table}_permits" (namespace, name, slot)
SELECT $1, $2, slot FROM (SELECT max(permits) AS permits FROM in_use) AS l,
       generate_series(0, l.permits - 1) AS slot
    ON CONFLICT DO NOTHING
