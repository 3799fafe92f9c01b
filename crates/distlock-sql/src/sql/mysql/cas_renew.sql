UPDATE `{table}`
   SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
 WHERE name = ? AND owner = ? AND fence = ?
