DELETE FROM `{table}`
 WHERE name = ? AND slot >= ? AND slot <= ? AND expires_at > NOW(6)
