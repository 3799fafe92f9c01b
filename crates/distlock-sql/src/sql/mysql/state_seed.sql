INSERT IGNORE INTO `{hw}` (id, floor) VALUES (0, 0)
