WITH won AS (
    UPDATE "{table}"
       SET owner = $1, expires_at = now() + interval '1 microsecond' * $2::float8, fence = fence + 1
     WHERE namespace = $3 AND name = $4
       AND (owner IS NULL OR expires_at IS NULL OR expires_at <= now())
 RETURNING fence
)
SELECT (SELECT fence FROM won),
       (SELECT GREATEST(0, (EXTRACT(EPOCH FROM expires_at - now()) * 1000000)::BIGINT)
          FROM "{table}" WHERE namespace = $3 AND name = $4)
