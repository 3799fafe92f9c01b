UPDATE `{table}`
   SET owner = ?, holder = ?, expires_at = NOW(6) + INTERVAL ? MICROSECOND, fence = LAST_INSERT_ID(fence + 1)
 WHERE name = ?
   AND ((owner IS NULL OR expires_at IS NULL OR expires_at <= NOW(6))
        AND (@distlock_bell = 1 OR @distlock_patient OR owner IS NOT NULL)
        OR LAST_INSERT_ID((1 << 63) | IF(owner IS NULL OR expires_at IS NULL OR expires_at <= NOW(6),
                                         1000000, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at))) = 0)
