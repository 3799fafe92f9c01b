SELECT mode, ticket, owner FROM "{table}_shares"
 WHERE namespace = $1 AND name = $2 AND granted AND expires_at > now()
 ORDER BY ticket
