INSERT INTO "{hw}" (namespace, floor) VALUES ($1, 0) ON CONFLICT DO NOTHING
