CREATE INDEX IF NOT EXISTS "{table}_ix" ON "{table}" (namespace, expires_at)
