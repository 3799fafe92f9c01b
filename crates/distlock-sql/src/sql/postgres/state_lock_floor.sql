SELECT floor FROM "{table}_hw" WHERE namespace = $1 FOR UPDATE
