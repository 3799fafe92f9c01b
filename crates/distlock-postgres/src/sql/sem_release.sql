WITH freed AS (
    UPDATE "{table}_permits" SET owner = NULL, expires_at = NULL
     WHERE namespace = $1 AND name = $2 AND owner = $3
 RETURNING slot
)
SELECT pg_notify($4, $5)::TEXT FROM freed
