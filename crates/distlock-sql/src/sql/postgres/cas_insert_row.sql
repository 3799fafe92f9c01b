INSERT INTO "{table}" (namespace, name, fence)
VALUES ($1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
    ON CONFLICT DO NOTHING
