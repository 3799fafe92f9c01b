SELECT COUNT(*) FROM "{table}"
 WHERE namespace = $1 AND starts_with(name, $2) AND (NOT $3 OR name = $2)
