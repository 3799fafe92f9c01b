SELECT name, slot, owner, fence FROM `{table}`
 WHERE name >= ? AND name < ? AND slot < 4294967295 AND expires_at > NOW(6)
