WITH gone AS (
    DELETE FROM "{table}_shares"
     WHERE namespace = $1 AND name = $2 AND owner = $3
 RETURNING ticket
)
SELECT pg_notify($4, $5)::TEXT FROM gone
