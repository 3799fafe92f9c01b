UPDATE "{table}"
   SET expires_at = now() + interval '1 microsecond' * $1::float8,
       used_at = CASE WHEN used_at BETWEEN now() - interval '1 second' AND now() THEN used_at ELSE now() END
 WHERE namespace = $2 AND name = $3 AND owner = $4 AND fence = $5
