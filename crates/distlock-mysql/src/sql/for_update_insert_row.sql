INSERT IGNORE INTO `{table}` (name, fence) VALUES (?, 0)
