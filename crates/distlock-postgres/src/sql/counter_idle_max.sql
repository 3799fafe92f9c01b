SELECT MAX(fence) FROM (
    SELECT fence FROM "{table}" t
     WHERE namespace = $1
       AND (expires_at IS NULL OR expires_at < now() - interval '1 microsecond' * $2::float8)
       AND NOT EXISTS (
           SELECT 1 FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.objsubid = 1
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.classid::BIGINT = (t.lock_key >> 32) & 4294967295
              AND l.objid::BIGINT = t.lock_key & 4294967295)
     LIMIT $3
) idle
