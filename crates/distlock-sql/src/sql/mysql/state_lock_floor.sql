SELECT floor FROM `{table}_hw` WHERE id = 0 FOR UPDATE
