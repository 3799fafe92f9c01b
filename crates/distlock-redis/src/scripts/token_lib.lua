-- Helpers prepended to every script that hands out, raises or keeps a fencing
-- token (the lock's, the fair lock's, the semaphore's and the read-write
-- lock's): per-name counters that expire once their name is idle, and a
-- high-water key per namespace (per slot in a Redis Cluster) that never
-- expires, so that a counter collected with its name starts above every token
-- it gave.
-- Counters and the high-water are canonical decimal text, compared by length
-- and then byte by byte: exact for every u64, where Lua numbers (doubles) are
-- exact only below 2^53.
local function decimal_less(a, b)
  return #a < #b or (#a == #b and a < b)
end

-- Keeps `key` at least `ms` milliseconds from now, never shortening it; a key
-- without expiry (a counter an earlier release wrote) gets one.
local function keep_for(key, ms)
  local left = redis.call('PTTL', key)
  if left == -1 or (left >= 0 and left <= tonumber(ms)) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Raises `key` to at least `value` (decimal text), keeping its expiry.
local function raise_to(key, value)
  local current = redis.call('GET', key)
  if not current or decimal_less(current, value) then
    redis.call('SET', key, value, 'KEEPTTL')
  end
end

-- The next token of the counter `fence`, which is then kept `keep` ms (the
-- lease's ttl plus state_ttl), and raises the namespace's `high_water` to it.
-- A missing counter (collected when its name was idle, or lost with a restart)
-- starts from the server clock in microseconds or the high-water, whichever is
-- higher: the high-water is at least every token granted in its namespace
-- (slot) while it survives, and the clock covers a high-water lost with the
-- server's data as long as it did not step back and there was less than one
-- grant per microsecond on average. The first token is one above that. The
-- clock is built as a string: Lua would print the number in exponent notation.
local function next_token(fence, high_water, keep)
  if redis.call('EXISTS', fence) == 0 then
    local now = redis.call('TIME')
    local seed = now[1] .. string.format('%06d', tonumber(now[2]))
    local highest = redis.call('GET', high_water)
    if highest and decimal_less(seed, highest) then
      seed = highest
    end
    redis.call('SET', fence, seed)
  end
  local token = redis.call('INCR', fence)
  raise_to(high_water, redis.call('GET', fence))
  keep_for(fence, keep)
  return token
end

