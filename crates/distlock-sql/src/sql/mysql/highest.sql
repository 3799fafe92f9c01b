SELECT highest FROM `{table}` WHERE resource = ?
