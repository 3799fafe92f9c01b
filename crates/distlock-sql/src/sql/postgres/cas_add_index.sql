CREATE INDEX IF NOT EXISTS "{table}_used" ON "{table}" (namespace, used_at)
