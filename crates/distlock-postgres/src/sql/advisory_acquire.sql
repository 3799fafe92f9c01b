WITH held AS MATERIALIZED (
    SELECT CASE WHEN $6::TEXT IS NULL THEN pg_try_advisory_lock($3)
                WHEN set_config('lock_timeout', $6, true) IS NULL THEN NULL
                ELSE pg_advisory_lock($3)::TEXT IS NOT NULL
           END AS got
), armed AS MATERIALIZED (
    SELECT got, CASE WHEN got THEN set_config('idle_session_timeout', $4, false) END AS idle,
           (EXTRACT(EPOCH FROM clock_timestamp() - statement_timestamp()) * 1000000)::BIGINT AS waited
      FROM held
), bumped AS (
    UPDATE "{table}" SET fence = fence + 1, holder = $5,
           expires_at = CASE WHEN expires_at >= now() THEN expires_at ELSE now() + interval '1 second' END
      FROM armed
     WHERE armed.got AND namespace = $1 AND name = $2 AND lock_key = $3
 RETURNING fence
)
SELECT (SELECT got FROM armed), (SELECT fence FROM bumped), (SELECT waited FROM armed)
