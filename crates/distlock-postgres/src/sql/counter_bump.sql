UPDATE "{table}" SET fence = fence + 1, holder = $4,
       expires_at = CASE WHEN expires_at >= now() THEN expires_at ELSE now() + interval '1 second' END
 WHERE namespace = $1 AND name = $2 AND lock_key = $3
RETURNING fence
