INSERT INTO `{values}` (resource, value, expires_at) VALUES (?, ?, NULL)
    ON DUPLICATE KEY UPDATE
        expires_at = IF(expires_at <= NOW(6), NULL, expires_at),
        value = VALUES(value)
