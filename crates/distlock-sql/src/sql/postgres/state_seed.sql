INSERT INTO "{table}_hw" (namespace, floor) VALUES ($1, 0) ON CONFLICT DO NOTHING
