UPDATE `{table}` FORCE INDEX (PRIMARY) SET expires_at = GREATEST(expires_at, NOW(6))
 WHERE name IN ({names})
