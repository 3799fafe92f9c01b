-- Takes one permit of a semaphore if one is free.
-- KEYS[1] expiry set (owner -> expiry ms), KEYS[2] info hash (owner ->
-- "slot:token"), KEYS[3] limit, KEYS[4] fence counter, KEYS[5] the
-- namespace's high-water (in the keys' slot)
-- ARGV[1] owner value, ARGV[2] ttl in ms, ARGV[3] limit, ARGV[4] '1' when the
-- caller was waiting, ARGV[5] channel (in the keys' slot), ARGV[6] PUBLISH,
-- or SPUBLISH in a Redis Cluster, ARGV[7] how long the counter is kept in ms
-- (the ttl plus state_ttl)
-- With a restart guard (restart_guard.lua is prepended): KEYS[6] the
-- namespace's marker, ARGV[8] the guard in ms, ARGV[9] the caller's run_id
-- Returns {1, slot, token} when won, {0, ms} when full (ms until the soonest
-- permit expires), {3, limit} when the semaphore is in use with another limit,
-- {2, ms} when the restart guard refuses for ms more.
local guard_left = restart_guard_left(KEYS[6], ARGV[8], ARGV[9])
if guard_left > 0 then
  return {2, guard_left}
end
local now = now_ms()
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
sweep(KEYS[1], KEYS[2], now)
local live = redis.call('ZCARD', KEYS[1])
local stored = tonumber(redis.call('GET', KEYS[3]))
if stored and stored ~= limit and live > 0 then
  return {3, stored}
end
-- The same attempt sent again (its first reply was lost) finds its permit.
local mine = redis.call('HGET', KEYS[2], ARGV[1])
if mine then
  local slot, token = string.match(mine, '^(%d+):(%d+)$')
  return {1, tonumber(slot), tonumber(token)}
end
if live >= limit then
  return {0, soonest(KEYS[1], now)}
end
-- The lowest slot no live permit has.
local taken = {}
for _, described in ipairs(redis.call('HVALS', KEYS[2])) do
  local slot = tonumber(string.match(described, '^(%d+):'))
  if slot then
    taken[slot] = true
  end
end
local slot = 0
while taken[slot] do
  slot = slot + 1
end
redis.call('SET', KEYS[3], limit, 'KEEPTTL')
local token = grant(KEYS[1], KEYS[2], KEYS[4], KEYS[5], ARGV[7], ARGV[1], ttl, now, function(t)
  return string.format('%d:%d', slot, t)
end)
keep_until(KEYS[3], now + ttl, now)
-- A waiter that got in passes the wake on while permits are left, so waiters
-- of one client that shared a single release message are not left asleep.
if ARGV[4] == '1' and live + 1 < limit then
  redis.call(ARGV[6], ARGV[5], 'released')
end
return {1, slot, token}
