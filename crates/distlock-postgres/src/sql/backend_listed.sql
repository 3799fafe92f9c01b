SELECT count(*) FROM pg_stat_activity WHERE pid = $1
