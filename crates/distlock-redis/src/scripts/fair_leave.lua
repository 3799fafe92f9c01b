-- Leaves the fair lock: releases it if the caller holds it, takes the caller
-- out of the queue, and tells the new head it is its turn.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] queue timeouts
-- ARGV[1] owner value, ARGV[2] lock channel (the turn channels '<lock
-- channel>:<owner>' are in the keys' slot), ARGV[3] PUBLISH, or SPUBLISH in
-- a Redis Cluster
-- Returns 1 when the caller held the lock, 0 otherwise (then a newer holder
-- keeps its lock).
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
end
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('LREM', KEYS[2], 0, ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    redis.call(ARGV[3], ARGV[2] .. ':' .. head, 'turn')
  end
end
return released
