SELECT 1 FROM `{table}` WHERE name = ?
