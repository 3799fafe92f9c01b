WITH freed AS (
    UPDATE "{table}_permits" SET owner = NULL, expires_at = NULL
     WHERE namespace = $1 AND name = $2 AND slot = $3 AND owner IS NOT NULL AND expires_at > now()
 RETURNING slot
)
SELECT pg_notify($4, $5)::TEXT FROM freed
