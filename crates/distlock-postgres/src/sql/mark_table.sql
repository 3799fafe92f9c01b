COMMENT ON TABLE "{table}" IS '{comment}'
