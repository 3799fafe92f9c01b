UPDATE "{table}_permits"
   SET expires_at = now() + interval '1 microsecond' * $4::float8
 WHERE namespace = $1 AND name = $2 AND owner = $3
