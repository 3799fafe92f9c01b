-- Takes a read or the write share of a read-write lock if its kind may enter.
-- KEYS[1] expiry set (owner -> expiry ms), KEYS[2] info hash (owner ->
-- "R:token" or "W:token"), KEYS[3] waiting writers (owner -> marker expiry ms),
-- KEYS[4] fence counter (one for both kinds, never expires)
-- ARGV[1] owner value, ARGV[2] ttl in ms, ARGV[3] 'R' or 'W', ARGV[4] '1' when
-- the caller was waiting, ARGV[5] channel, ARGV[6] how long a waiting writer's
-- marker lives (0: a try, no marker)
-- Returns {1, token} when won, {0, ms} when it must wait (ms until the soonest
-- share or marker in its way expires).
local now = now_ms()
local ttl = tonumber(ARGV[2])
local mode = ARGV[3]
sweep(KEYS[1], KEYS[2], now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
-- The same attempt sent again (its first reply was lost) finds its share.
local mine = redis.call('HGET', KEYS[2], ARGV[1])
if mine then
  return {1, tonumber(string.match(mine, ':(%d+)$'))}
end
local function describe(token)
  return string.format('%s:%d', mode, token)
end
if mode == 'W' then
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {1, grant(KEYS[1], KEYS[2], KEYS[4], ARGV[1], ttl, now, describe)}
  end
  -- Queued: readers arriving from now on wait behind this writer.
  local marker = tonumber(ARGV[6])
  if marker > 0 then
    redis.call('ZADD', KEYS[3], now + marker, ARGV[1])
    keep_until(KEYS[3], now + marker, now)
  end
  return {0, soonest(KEYS[1], now)}
end
-- A reader enters unless a writer holds or waits.
local first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local writing = first and string.sub(redis.call('HGET', KEYS[2], first) or '', 1, 1) == 'W'
if writing then
  return {0, soonest(KEYS[1], now)}
end
if redis.call('ZCARD', KEYS[3]) > 0 then
  return {0, soonest(KEYS[3], now)}
end
local token = grant(KEYS[1], KEYS[2], KEYS[4], ARGV[1], ttl, now, describe)
-- A waiter that got in passes the wake on: other readers of its client that
-- shared one release message may enter too.
if ARGV[4] == '1' then
  redis.call('PUBLISH', ARGV[5], 'released')
end
return {1, token}
