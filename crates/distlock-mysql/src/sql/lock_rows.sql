SELECT name, owner, holder FROM `{table}` WHERE name >= ? AND name < ? AND RIGHT(name, 1) <> 0x1E
