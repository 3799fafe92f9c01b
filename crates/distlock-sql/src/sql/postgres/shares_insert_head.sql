INSERT INTO "{table}" (namespace, name, slot, permits, fence, expires_at)
VALUES ($1, $2, 4294967295, $3,
        GREATEST((EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT, $4 + 1), now())
    ON CONFLICT DO NOTHING
