WITH tried AS MATERIALIZED (
    SELECT pg_try_advisory_lock($3) AS got
), held AS MATERIALIZED (
    SELECT CASE WHEN got OR NOT $6 THEN got
                WHEN pg_advisory_lock_shared($8, $9)::TEXT IS NOT NULL THEN pg_try_advisory_lock($3)
           END AS got,
           $7 OR (NOT got AND $6) AS marked
      FROM tried
), armed AS MATERIALIZED (
    SELECT got, CASE WHEN got THEN set_config('idle_session_timeout', $4, false) END AS idle,
           CASE WHEN got AND marked THEN pg_advisory_unlock_shared($8, $9) END AS unmarked
      FROM held
), other AS MATERIALIZED (
    SELECT namespace, name FROM "{table}"
     WHERE lock_key = $3 AND (namespace, name) <> ($1, $2)
     LIMIT 1
), bumped AS (
    UPDATE "{table}" SET fence = fence + 1, lock_key = $3, holder = $5, expires_at = now()
      FROM armed
     WHERE armed.got AND namespace = $1 AND name = $2 AND NOT EXISTS (SELECT 1 FROM other)
 RETURNING fence
)
SELECT (SELECT got FROM armed), (SELECT fence FROM bumped),
       (SELECT namespace FROM other), (SELECT name FROM other)
