WITH head AS MATERIALIZED (
    SELECT permits FROM "{table}_semaphores"
     WHERE namespace = $1 AND name = $2
       FOR UPDATE
), slots AS MATERIALIZED (
    SELECT slot, owner, expires_at FROM "{table}_permits"
     WHERE namespace = $1 AND name = $2 AND EXISTS (SELECT 1 FROM head)
       FOR UPDATE
), live AS (
    SELECT count(*) AS held FROM slots WHERE owner IS NOT NULL AND expires_at > now()
), resized AS (
    UPDATE "{table}_semaphores" SET permits = $3
     WHERE namespace = $1 AND name = $2
       AND (SELECT held FROM live) = 0 AND (SELECT permits FROM head) <> $3
 RETURNING permits
), grown AS (
    INSERT INTO "{table}_permits" (namespace, name, slot)
    SELECT $1, $2, slot FROM resized, generate_series(0, $3 - 1) AS slot
        ON CONFLICT DO NOTHING
), shrunk AS (
    DELETE FROM "{table}_permits"
     WHERE namespace = $1 AND name = $2 AND slot >= $3 AND EXISTS (SELECT 1 FROM resized)
)
SELECT (SELECT permits FROM head), (SELECT held FROM live)
