-- Takes a read or the write share of a read-write lock when its turn has come.
-- KEYS[1] expiry set (owner -> expiry ms), KEYS[2] info hash (owner ->
-- "R:token" or "W:token"), KEYS[3] queue (member "R:<owner>" or "W:<owner>"
-- -> arrival number), KEYS[4] places (member -> expiry ms of its place),
-- KEYS[5] arrival counter, KEYS[6] token counter (one for both kinds),
-- KEYS[7] the namespace's high-water (in the keys' slot)
-- ARGV[1] owner value (one per acquire), ARGV[2] ttl in ms, ARGV[3] 'R' or 'W',
-- ARGV[4] how long the caller's place lives without a new attempt (0: a try,
-- no place is taken), ARGV[5] channel (a waiter's own is '<channel>:<owner>',
-- both in the keys' slot), ARGV[6] PUBLISH, or SPUBLISH in a Redis
-- Cluster, ARGV[7] how long the counter is kept in ms (the ttl plus
-- state_ttl)
-- With a restart guard (restart_guard.lua is prepended): KEYS[8] the
-- namespace's marker, ARGV[8] the guard in ms, ARGV[9] the caller's run_id
-- Returns {1, token} when won, {0, ms} when it must wait (ms until the soonest
-- share or place that may be in its way expires), {2, ms} when the restart
-- guard refuses for ms more (the caller takes no place in the queue then:
-- waiters queue afresh once the guard has passed).
local guard_left = restart_guard_left(KEYS[8], ARGV[8], ARGV[9])
if guard_left > 0 then
  return {2, guard_left}
end
local now = now_ms()
local ttl = tonumber(ARGV[2])
local mode = ARGV[3]
local member = mode .. ':' .. ARGV[1]
sweep(KEYS[1], KEYS[2], now)
-- Waiters that stopped coming back (a crash) lose their place.
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, gone in ipairs(dead) do
  redis.call('ZREM', KEYS[3], gone)
end
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
end
-- The same attempt sent again (its first reply was lost) finds its share.
local mine = redis.call('HGET', KEYS[2], ARGV[1])
if mine then
  return {1, tonumber(string.match(mine, ':(%d+)$'))}
end
-- Wakes the waiters at the head whose turn it is now, on their own channels:
-- the head writer if nobody holds, or the run of readers at the head if no
-- writer holds. Called when the caller must wait (a release woke another
-- waiter of a client, or a predecessor vanished) and when a reader got in
-- (the readers behind it may follow).
local function wake_turns()
  local holders = redis.call('ZCARD', KEYS[1])
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if first and string.sub(redis.call('HGET', KEYS[2], first) or '', 1, 1) == 'W' then
    return
  end
  for _, waiter in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local kind = string.sub(waiter, 1, 1)
    if kind == 'W' and holders > 0 then
      return
    end
    if waiter ~= member then
      redis.call(ARGV[6], ARGV[5] .. ':' .. string.sub(waiter, 3), 'turn')
    end
    if kind == 'W' then
      return
    end
    holders = holders + 1
  end
end
local holders = redis.call('ZCARD', KEYS[1])
local first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local writing = first and string.sub(redis.call('HGET', KEYS[2], first) or '', 1, 1) == 'W'
-- Who arrived before the caller (everyone, for one not queued yet).
local arrival = redis.call('ZSCORE', KEYS[3], member)
local ahead
if arrival then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. arrival)
else
  ahead = redis.call('ZRANGE', KEYS[3], 0, -1)
end
local enters
if mode == 'W' then
  enters = holders == 0 and #ahead == 0
else
  enters = not writing
  for _, waiter in ipairs(ahead) do
    if string.sub(waiter, 1, 1) == 'W' then
      enters = false
      break
    end
  end
end
if enters then
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZREM', KEYS[4], member)
  local token = grant(KEYS[1], KEYS[2], KEYS[6], KEYS[7], ARGV[7], ARGV[1], ttl, now, function(t)
    return string.format('%s:%d', mode, t)
  end)
  if mode == 'R' then
    wake_turns()
  end
  return {1, token}
end
local place = tonumber(ARGV[4])
if place > 0 then
  if not arrival then
    redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), member)
  end
  redis.call('ZADD', KEYS[4], now + place, member)
  for i = 3, 5 do
    keep_until(KEYS[i], now + place, now)
  end
end
wake_turns()
local wait = soonest(KEYS[1], now)
local place_wait = soonest(KEYS[4], now)
if wait < 0 or (place_wait >= 0 and place_wait < wait) then
  wait = place_wait
end
return {0, wait}
