WITH other AS MATERIALIZED (
    SELECT namespace, name FROM "{table}"
     WHERE lock_key = $3 AND (namespace, name) <> ($1, $2)
     LIMIT 1
), bumped AS (
    UPDATE "{table}" SET fence = fence + 1, lock_key = $3, holder = $4,
           expires_at = CASE WHEN expires_at >= now() THEN expires_at ELSE now() + interval '1 second' END
     WHERE namespace = $1 AND name = $2 AND NOT EXISTS (SELECT 1 FROM other)
 RETURNING fence
)
SELECT (SELECT fence FROM bumped), (SELECT namespace FROM other), (SELECT name FROM other)
