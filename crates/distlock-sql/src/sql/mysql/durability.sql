SELECT CAST(@@innodb_flush_log_at_trx_commit AS SIGNED), CAST(@@read_only AS SIGNED)
