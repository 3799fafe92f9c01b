INSERT IGNORE INTO `{table}` (name, slot, permits, fence, expires_at)
VALUES (?, 4294967295, ?, GREATEST(CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED), ? + 1), NOW(6))
