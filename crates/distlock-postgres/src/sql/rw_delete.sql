WITH gone AS (
    DELETE FROM "{table}_shares"
     WHERE namespace = $1 AND name = $2 AND granted AND expires_at > now()
 RETURNING ticket
)
SELECT count(*), (SELECT pg_notify($3, $4)::TEXT WHERE EXISTS (SELECT 1 FROM gone)) FROM gone
