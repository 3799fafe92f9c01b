SELECT set_config('idle_session_timeout', $1, false)
