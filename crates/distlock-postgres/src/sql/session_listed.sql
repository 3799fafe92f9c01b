SELECT count(*)
  FROM pg_stat_activity
 WHERE pid = $1 AND (EXTRACT(EPOCH FROM backend_start) * 1000000)::BIGINT = $2
