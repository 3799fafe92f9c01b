-- Helpers prepended to every share script (semaphore permits, read-write lock
-- shares), after token_lib.lua. A share is a member (its owner value) of an expiry sorted set,
-- scored by its expiry in server milliseconds, with its description
-- ("slot:token" or "R:token"/"W:token") in a hash under the same member.

-- The server clock in milliseconds.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Drops the shares whose expiry has passed: a crashed holder's share ends here.
local function sweep(expiry, info, now)
  local expired = redis.call('ZRANGEBYSCORE', expiry, '-inf', now)
  for _, member in ipairs(expired) do
    redis.call('HDEL', info, member)
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', expiry, '-inf', now)
  end
end

-- Keeps `key` at least until `at` (server ms), so that the bookkeeping of
-- holders that all crashed disappears on its own.
local function keep_until(key, at, now)
  keep_for(key, at - now)
end

-- Records a granted share and returns its token (the counter kept `keep` ms).
local function grant(expiry, info, fence, high_water, keep, owner, ttl, now, describe)
  local token = next_token(fence, high_water, keep)
  redis.call('ZADD', expiry, now + ttl, owner)
  redis.call('HSET', info, owner, describe(token))
  keep_until(expiry, now + ttl, now)
  keep_until(info, now + ttl, now)
  return token
end

-- How long until the soonest share (or waiting marker) of `set` expires, in ms.
local function soonest(set, now)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 0)
  end
  return -2
end
