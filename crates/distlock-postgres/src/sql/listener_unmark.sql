SELECT pg_advisory_unlock_shared(hashtext($1), hashtext($2))
