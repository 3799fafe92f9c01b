-- Takes the lock if it is free and returns a fresh fencing token; otherwise says
-- how long the holder's lease has left, so the waiter can bound its sleep.
-- KEYS[1] lock key, KEYS[2] fence counter (never expires),
-- KEYS[3] restart-guard marker of the namespace (only when a guard is set)
-- ARGV[1] owner value (random per attempt), ARGV[2] ttl in milliseconds,
-- ARGV[3] guard in milliseconds, ARGV[4] the run_id of the caller's connection
-- ('' when the server did not tell it); restart_guard.lua is prepended
-- Returns {1, token} when won, {0, pttl} when held (pttl -1: the key has no
-- expiry), {2, ms} when the restart guard refuses for ms more.
local guard_left = restart_guard_left(KEYS[3], ARGV[3], ARGV[4])
if guard_left > 0 then
  return {2, guard_left}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    -- A counter lost with a restart starts again from the server clock in
    -- microseconds, which is above every token handed out before as long as the
    -- clock did not step back and there was less than one acquisition per
    -- microsecond on average. Built as a string: Lua would print the number
    -- in exponent notation.
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  return {1, redis.call('INCR', KEYS[2])}
end
-- The same attempt sent again (its first reply was lost with a dead connection)
-- finds its own owner value: it won, and nobody can have moved the counter since.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, redis.call('GET', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
