SELECT name, owner FROM "{table}"
 WHERE namespace = $1 AND starts_with(name, $2) AND (NOT $3 OR name = $2)
   AND owner IS NOT NULL AND ($4 OR expires_at > now())
 ORDER BY name
