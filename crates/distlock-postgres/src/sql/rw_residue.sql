SELECT name, ticket, mode, granted FROM "{table}_shares"
 WHERE namespace = $1 AND starts_with(name, $2) AND expires_at > now()
 ORDER BY name, ticket
