SELECT MAX(fence) FROM (
    SELECT fence FROM "{table}"
     WHERE namespace = $1
       AND used_at < now() - interval '1 microsecond' * $2::float8
       AND (expires_at IS NULL OR expires_at < now() - interval '1 microsecond' * $2::float8)
     LIMIT $3
) idle
