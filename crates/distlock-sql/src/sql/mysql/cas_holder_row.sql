SELECT owner, fence, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), holder
  FROM `{table}`
 WHERE name = ? AND owner IS NOT NULL AND expires_at > NOW(6)
