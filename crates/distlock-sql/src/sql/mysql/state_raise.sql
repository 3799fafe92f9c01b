UPDATE `{table}_hw` SET floor = GREATEST(floor, ?) WHERE id = 0
