SELECT c.name, CAST(l.name IS NOT NULL AS SIGNED) FROM `{table}` c
  LEFT JOIN `{table}` l ON l.name = LEFT(c.name, LENGTH(c.name) - 1)
 WHERE c.expires_at < NOW(6) - INTERVAL ? MICROSECOND AND RIGHT(c.name, 1) = 0x1E
 LIMIT ?
