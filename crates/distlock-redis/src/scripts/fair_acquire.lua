-- The fair lock's acquire: the lock goes to the waiter at the head of the
-- queue, or to anyone when nobody waits.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] queue (list of owner
-- values, arrival order), KEYS[4] queue timeouts (owner -> marker expiry
-- ms), KEYS[5] the namespace's high-water (in the keys' slot)
-- ARGV[1] owner value (one per acquire, kept while it waits), ARGV[2] ttl in
-- ms, ARGV[3] how long the caller's place lives without a new attempt (0: a
-- try, no place is taken), ARGV[4] lock channel (a waiter's own channel is
-- '<lock channel>:<owner>', both in the keys' slot), ARGV[5] PUBLISH, or
-- SPUBLISH in a Redis Cluster, ARGV[6] how long the counter is kept in ms
-- (the ttl plus state_ttl)
-- Returns {1, token} when won, {0, ms} when it must wait (ms until the holder's
-- lease or the head's place expires).
local now = now_ms()
-- Waiters that stopped coming back (a crash) lose their place.
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, member in ipairs(dead) do
  redis.call('LREM', KEYS[3], 0, member)
end
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
end
-- The same attempt sent again (its first reply was lost) finds its lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local head = redis.call('LINDEX', KEYS[3], 0)
if redis.call('EXISTS', KEYS[1]) == 0 and (not head or head == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  return {1, next_token(KEYS[2], KEYS[5], ARGV[6])}
end
local place = tonumber(ARGV[3])
if place > 0 then
  if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    redis.call('RPUSH', KEYS[3], ARGV[1])
  end
  redis.call('ZADD', KEYS[4], now + place, ARGV[1])
  keep_until(KEYS[3], now + place, now)
  keep_until(KEYS[4], now + place, now)
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  -- Free, but another waiter's turn: make sure it knows.
  head = redis.call('LINDEX', KEYS[3], 0)
  redis.call(ARGV[5], ARGV[4] .. ':' .. head, 'turn')
  return {0, math.max(tonumber(redis.call('ZSCORE', KEYS[4], head)) - now, 0)}
end
return {0, pttl}
