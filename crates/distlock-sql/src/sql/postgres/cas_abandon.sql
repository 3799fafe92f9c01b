WITH freed AS (
    UPDATE "{table}" SET owner = NULL, expires_at = now()
     WHERE namespace = $1 AND name = $2 AND owner = $3
 RETURNING name
)
SELECT pg_notify('{channel}', $1 || E'\n' || $2)::TEXT FROM freed
