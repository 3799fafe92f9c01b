UPDATE "{table}" SET permits = $1 WHERE namespace = $2 AND name = $3 AND slot = 4294967295
