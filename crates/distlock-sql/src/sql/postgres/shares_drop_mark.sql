DELETE FROM "{table}" WHERE namespace = $1 AND name = $2 AND owner = $3 AND slot <> $4
