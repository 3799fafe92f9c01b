SELECT value FROM `{values}`
    WHERE resource = ? AND (expires_at IS NULL OR expires_at > NOW(6))
