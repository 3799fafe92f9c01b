UPDATE `{table}` SET fence = LAST_INSERT_ID(fence + 1), expires_at = NOW(6) + INTERVAL ? MICROSECOND WHERE name = ?
