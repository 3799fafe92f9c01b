SELECT current_setting('fsync') = 'on' AND current_setting('synchronous_commit') <> 'off', pg_is_in_recovery()
