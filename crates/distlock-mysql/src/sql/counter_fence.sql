SELECT fence FROM `{table}` WHERE name = ?
