DROP INDEX IF EXISTS "{table}_ix"
