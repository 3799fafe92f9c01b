-- Extends a share if it is still live and the caller's, and keeps the
-- primitive's fence counter at least the new ttl plus state_ttl.
-- KEYS[1] expiry set, KEYS[2] info hash, KEYS[3] fence counter; ARGV[1] owner
-- value, ARGV[2] ttl in ms, ARGV[3] how long the counter is kept in ms
-- Returns 1 when extended, 0 when the share is gone or expired (then it is
-- dropped: its holder no longer believes it holds it either).
local now = now_ms()
local ttl = tonumber(ARGV[2])
local expires = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if expires and expires > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep_until(KEYS[1], now + ttl, now)
  keep_until(KEYS[2], now + ttl, now)
  keep_for(KEYS[3], ARGV[3])
  return 1
end
if expires then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 0
