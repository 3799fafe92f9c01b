DELETE FROM `{table}` WHERE name IN ({names}) AND fence <= ?
