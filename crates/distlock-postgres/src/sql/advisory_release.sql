SELECT pg_advisory_unlock($1), set_config('idle_session_timeout', '0', false)
