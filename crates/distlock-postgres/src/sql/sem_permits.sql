SELECT slot, fence, owner FROM "{table}_permits"
 WHERE namespace = $1 AND name = $2 AND owner IS NOT NULL AND expires_at > now()
 ORDER BY slot
