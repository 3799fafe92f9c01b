UPDATE `{table}` SET expires_at = GREATEST(COALESCE(expires_at, NOW(6)), NOW(6)) WHERE name = ?
