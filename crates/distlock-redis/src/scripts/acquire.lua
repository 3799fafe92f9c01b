-- Takes the lock if it is free and returns a fresh fencing token; otherwise says
-- how long the holder's lease has left, so the waiter can bound its sleep.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] the namespace's high-water
-- (in the lock's slot), KEYS[4] restart-guard marker of the namespace (only
-- when a guard is set)
-- ARGV[1] owner value (random per attempt), ARGV[2] ttl in milliseconds,
-- ARGV[3] how long the counter is kept in ms (the ttl plus state_ttl),
-- ARGV[4] guard in milliseconds, ARGV[5] the run_id of the caller's connection
-- ('' when the server did not tell it); restart_guard.lua and token_lib.lua
-- are prepended
-- Returns {1, token} when won, {0, pttl} when held (pttl -1: the key has no
-- expiry), {2, ms} when the restart guard refuses for ms more.
local guard_left = restart_guard_left(KEYS[4], ARGV[4], ARGV[5])
if guard_left > 0 then
  return {2, guard_left}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, next_token(KEYS[2], KEYS[3], ARGV[3])}
end
-- The same attempt sent again (its first reply was lost with a dead connection)
-- finds its own owner value: it won, and nobody can have moved the counter since.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, redis.call('GET', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
