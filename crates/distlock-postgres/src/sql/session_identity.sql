SELECT pid, (EXTRACT(EPOCH FROM backend_start) * 1000000)::BIGINT
  FROM pg_stat_activity
 WHERE pid = pg_backend_pid()
