SELECT name, slot, owner, fence FROM "{table}"
 WHERE namespace = $1 AND starts_with(name, $2) AND (NOT $3 OR name = $2)
   AND slot < 4294967295 AND expires_at > statement_timestamp()
 ORDER BY name, slot
