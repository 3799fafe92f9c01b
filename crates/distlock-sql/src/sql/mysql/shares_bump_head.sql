UPDATE `{table}`
   SET fence = LAST_INSERT_ID(fence + 1),
       expires_at = GREATEST(IFNULL(expires_at, NOW(6)), NOW(6) + INTERVAL ? MICROSECOND)
 WHERE name = ? AND slot = 4294967295
