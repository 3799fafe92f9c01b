UPDATE "{table}"
   SET expires_at = now() + interval '1 microsecond' * $5::float8
 WHERE namespace = $1 AND name = $2 AND owner = $3 AND fence = $4
