DELETE FROM "{table}"
 WHERE namespace = $1 AND name = $2 AND slot < 4294967295 AND expires_at <= statement_timestamp()
