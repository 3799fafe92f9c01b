INSERT INTO `{values}` (resource, value, expires_at)
    VALUES (?, ?, IF(? IS NULL, NULL, TIMESTAMPADD(MICROSECOND, ?, NOW(6))))
    ON DUPLICATE KEY UPDATE value = VALUES(value), expires_at = VALUES(expires_at)
