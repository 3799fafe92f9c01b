UPDATE `{table}`
   SET owner = NULL, expires_at = NOW(6)
 WHERE name = ? AND owner = ? AND fence = ?
