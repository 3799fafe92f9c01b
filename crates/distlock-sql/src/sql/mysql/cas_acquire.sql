UPDATE `{table}`
   SET owner = ?, holder = ?, expires_at = NOW(6) + INTERVAL ? MICROSECOND, fence = LAST_INSERT_ID(fence + 1)
 WHERE name = ?
   AND (owner IS NULL OR expires_at IS NULL OR expires_at <= NOW(6)
        OR LAST_INSERT_ID((1 << 63) | TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at)) = 0)
