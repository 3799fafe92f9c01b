INSERT INTO "{table}" AS f (resource, highest) VALUES ($1, $2)
    ON CONFLICT (resource) DO UPDATE SET highest = GREATEST(f.highest, EXCLUDED.highest)
RETURNING highest
