WITH freed AS (
    UPDATE "{table}" SET owner = NULL, expires_at = now()
     WHERE namespace = $1 AND name = $2 AND owner = $3
 RETURNING name
)
SELECT CASE WHEN NOT pg_try_advisory_xact_lock(hashtext('{channel}'), hashtext($1 || E'\n' || $2))
            THEN pg_notify('{channel}', $1 || E'\n' || $2)::TEXT END
  FROM freed
