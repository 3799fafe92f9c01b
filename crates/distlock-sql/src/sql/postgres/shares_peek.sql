SELECT slot, permits, owner, COALESCE(expires_at > statement_timestamp(), false),
       GREATEST(COALESCE((EXTRACT(EPOCH FROM expires_at - statement_timestamp()) * 1000000)::BIGINT, 0), 0),
       fence
  FROM "{table}"
 WHERE namespace = $1 AND name = $2
