INSERT INTO `{table}` (name, owner, holder, fence, expires_at)
VALUES (?, ?, ?, 0, NOW(6) + INTERVAL ? MICROSECOND)
