WITH other AS MATERIALIZED (
    SELECT namespace, name FROM "{table}"
     WHERE lock_key = $3 AND (namespace, name) <> ($1, $2)
     LIMIT 1
), bumped AS (
    UPDATE "{table}" SET fence = fence + 1, lock_key = $3, holder = $4,
           expires_at = CASE WHEN expires_at >= now() THEN expires_at ELSE now() + interval '1 second' END
     WHERE namespace = $1 AND name = $2
       AND (lock_key = $3 OR NOT EXISTS (
               SELECT 1 FROM "{table}" o
                WHERE o.lock_key = $3 AND (o.namespace, o.name) <> ("{table}".namespace, "{table}".name)))
 RETURNING fence
)
SELECT (SELECT fence FROM bumped),
       CASE WHEN NOT EXISTS (SELECT 1 FROM bumped) THEN (SELECT namespace FROM other) END,
       CASE WHEN NOT EXISTS (SELECT 1 FROM bumped) THEN (SELECT name FROM other) END
