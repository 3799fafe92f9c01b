ALTER TABLE `{table}` ADD INDEX distlock_idle (expires_at)
