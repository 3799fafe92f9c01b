-- Deletes the lock only if the caller still owns it, and wakes the waiters.
-- KEYS[1] lock key; ARGV[1] owner value, ARGV[2] release channel (in the lock
-- key's slot), ARGV[3] PUBLISH, or SPUBLISH in a Redis Cluster
-- Returns 1 when released, 0 when the lock was gone or someone else's (then
-- nothing is touched: a newer holder keeps its lock).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[3], ARGV[2], 'released')
  return 1
end
return 0
