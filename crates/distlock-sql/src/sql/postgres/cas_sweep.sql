DELETE FROM "{table}" WHERE ctid IN (
    SELECT ctid FROM "{table}"
     WHERE namespace = $1
       AND used_at < now() - interval '1 microsecond' * $2::float8
       AND (expires_at IS NULL OR expires_at < now() - interval '1 microsecond' * $2::float8)
       AND fence <= $3
     LIMIT $4
       FOR UPDATE SKIP LOCKED
)
