WITH won AS (
    UPDATE "{table}"
       SET owner = $3, expires_at = now() + interval '1 microsecond' * $4::float8, fence = fence + 1
     WHERE namespace = $1 AND name = $2
       AND (owner IS NULL OR expires_at IS NULL OR expires_at <= now())
 RETURNING fence
)
SELECT (SELECT fence FROM won),
       (SELECT GREATEST(0, (EXTRACT(EPOCH FROM expires_at - now()) * 1000000)::BIGINT)
          FROM "{table}" WHERE namespace = $1 AND name = $2)
