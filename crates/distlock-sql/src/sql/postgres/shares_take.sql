INSERT INTO "{table}" (namespace, name, slot, owner, fence, expires_at)
VALUES ($1, $2, $3, $4, $5, statement_timestamp() + interval '1 microsecond' * $6::float8)
    ON CONFLICT (namespace, name, slot)
    DO UPDATE SET owner = EXCLUDED.owner, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at
