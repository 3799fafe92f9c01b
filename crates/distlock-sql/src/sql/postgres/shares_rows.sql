SELECT slot, permits, owner, COALESCE(slot < 4294967295 AND expires_at > statement_timestamp(), false),
       GREATEST(COALESCE((EXTRACT(EPOCH FROM expires_at - statement_timestamp()) * 1000000)::BIGINT, 0), 0),
       fence
  FROM "{table}"
 WHERE namespace = $1 AND name = $2
   FOR UPDATE
