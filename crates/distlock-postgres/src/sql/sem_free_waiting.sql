    SELECT slot FROM (
        SELECT slot, owner, expires_at FROM "{table}_permits"
         WHERE namespace = $1 AND name = $2 AND slot < $3 AND EXISTS (SELECT 1 FROM head)
         ORDER BY slot
           FOR UPDATE
    ) AS newest
     WHERE owner IS NULL OR expires_at IS NULL OR expires_at <= now()
     LIMIT 1
