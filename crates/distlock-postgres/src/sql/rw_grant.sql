WITH purged AS (
    DELETE FROM "{table}_shares"
     WHERE namespace = $1 AND name = $2 AND ticket < $3 AND expires_at <= now()
 RETURNING ticket
), ahead AS MATERIALIZED (
    SELECT expires_at FROM "{table}_shares"
     WHERE namespace = $1 AND name = $2 AND ticket < $3
       AND ($6 OR mode = 'write')
       AND ticket NOT IN (SELECT ticket FROM purged)
), mine AS (
    UPDATE "{table}_shares"
       SET granted = NOT EXISTS (SELECT 1 FROM ahead),
           expires_at = now() + interval '1 microsecond' * $5::float8
     WHERE namespace = $1 AND name = $2 AND ticket = $3 AND owner = $4
 RETURNING granted
)
SELECT (SELECT granted FROM mine),
       (SELECT (EXTRACT(EPOCH FROM min(expires_at) - now()) * 1000000)::BIGINT FROM ahead)
