DELETE FROM `{table}`
 WHERE (expires_at IS NULL OR expires_at < NOW(6) - INTERVAL ? MICROSECOND) AND fence <= ?
 LIMIT ?
