SELECT name, owner FROM `{table}`
 WHERE name >= ? AND name < ? AND owner IS NOT NULL AND (? OR expires_at > NOW(6))
