INSERT INTO `{table}` (resource, highest) VALUES (?, ?)
    ON DUPLICATE KEY UPDATE highest = IF(highest <= ?, ?, LAST_INSERT_ID(highest))
