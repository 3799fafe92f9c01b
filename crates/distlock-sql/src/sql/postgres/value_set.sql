INSERT INTO "{values}" (resource, value, expires_at)
    VALUES ($1, $2, CASE WHEN $3::BIGINT IS NULL THEN NULL
                         ELSE now() + interval '1 microsecond' * $4::BIGINT::FLOAT8 END)
    ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at
