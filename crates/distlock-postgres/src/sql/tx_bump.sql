WITH other AS MATERIALIZED (
    SELECT namespace, name FROM "{table}"
     WHERE lock_key = $3 AND (namespace, name) <> ($1, $2)
     LIMIT 1
), bumped AS (
    INSERT INTO "{table}" (namespace, name, fence, lock_key, holder)
    SELECT $1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT, $3, $4
     WHERE NOT EXISTS (SELECT 1 FROM other)
        ON CONFLICT (namespace, name)
        DO UPDATE SET fence = "{table}".fence + 1, lock_key = EXCLUDED.lock_key,
                      holder = EXCLUDED.holder
 RETURNING fence
)
SELECT (SELECT fence FROM bumped), (SELECT namespace FROM other), (SELECT name FROM other)
