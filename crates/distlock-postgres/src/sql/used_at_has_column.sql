SELECT COUNT(*) FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name = '{table}' AND column_name = 'used_at'
