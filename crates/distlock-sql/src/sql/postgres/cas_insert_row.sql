INSERT INTO "{table}" (namespace, name, fence, expires_at, used_at)
VALUES ($1, $2, GREATEST((EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT, $3 + 1), now(), now())
    ON CONFLICT DO NOTHING
