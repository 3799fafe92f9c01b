INSERT INTO "{values}" AS v (resource, value, expires_at) VALUES ($1, $2, NULL)
    ON CONFLICT (resource) DO UPDATE SET
        expires_at = CASE WHEN v.expires_at <= now() THEN NULL ELSE v.expires_at END,
        value = EXCLUDED.value
