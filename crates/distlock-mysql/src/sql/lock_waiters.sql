SELECT DISTINCT CAST(w.requesting_trx_id AS CHAR), COALESCE(CAST(l.lock_data AS CHAR), '')
  FROM information_schema.INNODB_LOCK_WAITS w
  JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id
 WHERE l.lock_table LIKE ? AND l.lock_data LIKE ?
