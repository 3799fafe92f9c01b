SELECT CAST(b.trx_mysql_thread_id AS UNSIGNED)
  FROM information_schema.INNODB_LOCK_WAITS w
  JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
  JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
 WHERE r.trx_mysql_thread_id = ?
