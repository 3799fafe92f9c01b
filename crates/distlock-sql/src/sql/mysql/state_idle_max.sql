SELECT MAX(fence) FROM (
    SELECT fence FROM `{table}`
     WHERE expires_at IS NULL OR expires_at < NOW(6) - INTERVAL ? MICROSECOND
     LIMIT ?
) idle
