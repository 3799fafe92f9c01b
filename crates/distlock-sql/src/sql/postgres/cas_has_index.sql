SELECT COUNT(*) FROM pg_indexes
 WHERE schemaname = current_schema() AND tablename = '{table}' AND indexname = '{table}_used'
