DELETE FROM `{table}` WHERE name = ? AND owner IS NOT NULL
