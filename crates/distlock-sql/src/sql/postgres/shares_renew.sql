UPDATE "{table}"
   SET expires_at = statement_timestamp() + interval '1 microsecond' * $1::float8
 WHERE namespace = $2 AND name = $3 AND owner = $4 AND fence = $5 AND expires_at > statement_timestamp()
