UPDATE "{table}"
   SET fence = fence + 1,
       expires_at = GREATEST(COALESCE(expires_at, statement_timestamp()),
                             statement_timestamp() + interval '1 microsecond' * $1::float8)
 WHERE namespace = $2 AND name = $3 AND slot = 4294967295
RETURNING fence
