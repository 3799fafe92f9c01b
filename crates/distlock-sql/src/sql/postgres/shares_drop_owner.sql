WITH gone AS (
    DELETE FROM "{table}" WHERE namespace = $1 AND name = $2 AND owner = $3
 RETURNING slot
)
SELECT pg_notify('{channel}', $1 || E'\n' || $2 || E'\n{kind}')::TEXT FROM gone
