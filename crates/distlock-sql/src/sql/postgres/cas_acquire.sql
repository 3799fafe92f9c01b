WITH won AS (
    UPDATE "{table}"
       SET owner = $1, holder = $2, expires_at = now() + interval '1 microsecond' * $3::float8,
           fence = fence + 1,
           used_at = CASE WHEN used_at BETWEEN now() - interval '1 second' AND now() THEN used_at ELSE now() END
     WHERE namespace = $4 AND name = $5
       AND (owner IS NULL OR expires_at IS NULL OR expires_at <= now())
 RETURNING fence
)
SELECT (SELECT fence FROM won),
       CASE WHEN NOT EXISTS (SELECT 1 FROM won) THEN
           (SELECT GREATEST(0, (EXTRACT(EPOCH FROM expires_at - now()) * 1000000)::BIGINT)
              FROM "{table}" WHERE namespace = $4 AND name = $5)
       END
