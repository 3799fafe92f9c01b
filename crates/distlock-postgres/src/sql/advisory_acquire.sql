WITH held AS MATERIALIZED (
    SELECT pg_try_advisory_lock($3) AS got
), armed AS MATERIALIZED (
    SELECT got, CASE WHEN got THEN set_config('idle_session_timeout', $4, false) END AS idle
      FROM held
), other AS MATERIALIZED (
    SELECT namespace, name FROM "{table}"
     WHERE lock_key = $3 AND (namespace, name) <> ($1, $2)
     LIMIT 1
), bumped AS (
    INSERT INTO "{table}" (namespace, name, fence, lock_key, holder)
    SELECT $1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT, $3, $5
      FROM armed
     WHERE got AND NOT EXISTS (SELECT 1 FROM other)
        ON CONFLICT (namespace, name)
        DO UPDATE SET fence = "{table}".fence + 1, lock_key = EXCLUDED.lock_key,
                      holder = EXCLUDED.holder
 RETURNING fence
)
SELECT (SELECT got FROM armed), (SELECT fence FROM bumped),
       (SELECT namespace FROM other), (SELECT name FROM other)
