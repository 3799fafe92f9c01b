SELECT pg_advisory_unlock($1), pg_notify($2, $3)::TEXT, set_config('idle_session_timeout', '0', false)
