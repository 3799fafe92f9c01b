WITH freed AS (
    UPDATE "{table}" SET owner = NULL, expires_at = now()
     WHERE namespace = $1 AND name = $2 AND owner = $3 AND fence = $4
 RETURNING name
)
SELECT pg_notify('{channel}', $1 || E'\n' || $2)::TEXT, set_config('synchronous_commit', 'off', true)
  FROM freed
