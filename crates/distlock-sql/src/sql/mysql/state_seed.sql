INSERT IGNORE INTO `{table}_hw` (id, floor) VALUES (0, 0)
