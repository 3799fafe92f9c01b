SELECT t.name, t.fence, l.pid, (EXTRACT(EPOCH FROM a.backend_start) * 1000000)::BIGINT,
       t.holder
  FROM "{table}" t
  JOIN pg_locks l
    ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid::BIGINT = (t.lock_key >> 32) & 4294967295
   AND l.objid::BIGINT = t.lock_key & 4294967295
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE t.namespace = $1 AND starts_with(t.name, $2) AND (NOT $3 OR t.name = $2)
 ORDER BY t.name
