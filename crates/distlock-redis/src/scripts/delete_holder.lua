-- An operator's force-unlock: deletes the lock whoever holds it, and wakes the
-- waiters as a release would.
-- KEYS[1] lock key; ARGV[1] release channel
-- Returns 1 when there was a lock to delete, 0 otherwise.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'released')
  return 1
end
return 0
