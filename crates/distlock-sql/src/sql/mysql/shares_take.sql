INSERT INTO `{table}` (name, slot, owner, fence, expires_at)
VALUES (?, ?, ?, ?, NOW(6) + INTERVAL ? MICROSECOND)
    ON DUPLICATE KEY UPDATE owner = VALUES(owner), fence = VALUES(fence), expires_at = VALUES(expires_at)
