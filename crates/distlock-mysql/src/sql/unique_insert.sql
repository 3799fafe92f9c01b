INSERT INTO `{table}` (name, owner, fence, expires_at)
VALUES (?, ?, 0, NOW(6) + INTERVAL ? MICROSECOND)
