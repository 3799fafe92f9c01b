SELECT owner, fence, GREATEST(0, (EXTRACT(EPOCH FROM expires_at - now()) * 1000000)::BIGINT),
       holder
  FROM "{table}"
 WHERE namespace = $1 AND name = $2 AND owner IS NOT NULL AND expires_at > now()
