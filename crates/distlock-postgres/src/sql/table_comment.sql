SELECT to_regclass(quote_ident($1)) IS NOT NULL, obj_description(to_regclass(quote_ident($1)), 'pg_class')
