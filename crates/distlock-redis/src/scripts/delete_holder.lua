-- An operator's force-unlock: deletes the lock whoever holds it, and wakes the
-- waiters as a release would.
-- KEYS[1] lock key; ARGV[1] release channel (in the lock key's slot), ARGV[2]
-- PUBLISH, or SPUBLISH in a Redis Cluster
-- Returns 1 when there was a lock to delete, 0 otherwise.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[2], ARGV[1], 'released')
  return 1
end
return 0
