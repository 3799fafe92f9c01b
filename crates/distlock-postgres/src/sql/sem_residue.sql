SELECT name, slot FROM "{table}_permits"
 WHERE namespace = $1 AND starts_with(name, $2) AND owner IS NOT NULL AND expires_at > now()
 ORDER BY name, slot
