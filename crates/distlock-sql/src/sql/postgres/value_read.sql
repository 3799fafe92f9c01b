SELECT value FROM "{values}"
    WHERE resource = $1 AND (expires_at IS NULL OR expires_at > now())
