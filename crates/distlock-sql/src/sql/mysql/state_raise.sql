UPDATE `{hw}` SET floor = GREATEST(floor, ?) WHERE id = 0
