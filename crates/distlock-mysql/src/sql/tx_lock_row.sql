SELECT fence FROM `{table}` WHERE name = ? FOR UPDATE
