INSERT INTO "{table}" (namespace, name, fence, lock_key, holder, expires_at)
VALUES ($1, $2, GREATEST((EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT, $5 + 1),
        $3, $4, now())
    ON CONFLICT DO NOTHING
