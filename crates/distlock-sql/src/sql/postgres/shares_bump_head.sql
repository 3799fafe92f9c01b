INSERT INTO "{table}" AS t (namespace, name, slot, permits, fence)
VALUES ($1, $2, 4294967295, $3, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
    ON CONFLICT (namespace, name, slot) DO UPDATE SET fence = t.fence + 1
RETURNING fence
