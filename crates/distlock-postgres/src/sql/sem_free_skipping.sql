    SELECT slot FROM "{table}_permits"
     WHERE namespace = $1 AND name = $2 AND slot < $3
       AND (owner IS NULL OR expires_at IS NULL OR expires_at <= now())
       AND EXISTS (SELECT 1 FROM head)
     ORDER BY slot
     LIMIT 1
       FOR UPDATE
