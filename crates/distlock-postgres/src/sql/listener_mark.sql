SELECT pg_advisory_lock_shared(hashtext($1), hashtext($2))
