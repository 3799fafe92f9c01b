DELETE FROM `{table}` WHERE name = ? AND owner = ? AND slot <> ?
