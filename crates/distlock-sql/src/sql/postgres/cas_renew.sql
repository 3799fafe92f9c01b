UPDATE "{table}"
   SET expires_at = now() + interval '1 microsecond' * $1::float8
 WHERE namespace = $2 AND name = $3 AND owner = $4 AND fence = $5
