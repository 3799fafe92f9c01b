SELECT CAST(COUNT(*) AS UNSIGNED) FROM `{table}` WHERE name >= ? AND name < ?
