WITH unlocked AS MATERIALIZED (
    SELECT pg_advisory_unlock($1) AS released
)
SELECT released,
       CASE WHEN NOT pg_try_advisory_xact_lock($4, $5) THEN pg_notify($2, $3)::TEXT END,
       set_config('idle_session_timeout', '0', false)
  FROM unlocked
