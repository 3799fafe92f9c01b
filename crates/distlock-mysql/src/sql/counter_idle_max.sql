SELECT MAX(fence) FROM (
    SELECT fence FROM `{table}`
     WHERE (expires_at IS NULL OR expires_at < NOW(6) - INTERVAL ? MICROSECOND)
       AND name NOT IN (
           SELECT counter FROM (
               SELECT CONCAT(name, 0x1E) AS counter FROM `{table}`
                WHERE expires_at > NOW(6) AND RIGHT(name, 1) <> 0x1E
           ) live)
     LIMIT ?
) idle
