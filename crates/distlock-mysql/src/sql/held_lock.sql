SELECT name, fence, CAST(expires_at < NOW(6) - INTERVAL ? MICROSECOND AS SIGNED) FROM `{table}`
 WHERE name IN ({names})
   FOR UPDATE SKIP LOCKED
