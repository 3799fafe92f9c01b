SELECT slot, permits, owner, IFNULL(slot < 4294967295 AND expires_at > NOW(6), 0),
       GREATEST(IFNULL(TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), 0), 0), fence
  FROM `{table}`
 WHERE name = ?
   FOR UPDATE
