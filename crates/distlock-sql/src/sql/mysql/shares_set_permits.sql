UPDATE `{table}` SET permits = ? WHERE name = ? AND slot = 4294967295
