UPDATE `{table}`
   SET owner = ?, holder = ?, expires_at = NOW(6) + INTERVAL ? MICROSECOND
 WHERE name = ?
   AND LAST_INSERT_ID((1 << 63) | GREATEST(IFNULL(TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), 0), 0))
       = (1 << 63)
