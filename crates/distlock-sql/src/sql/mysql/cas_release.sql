UPDATE `{table}`
   SET owner = NULL, expires_at = NULL
 WHERE name = ? AND owner = ? AND fence = ?
