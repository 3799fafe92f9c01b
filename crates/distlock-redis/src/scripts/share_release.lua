-- Gives a share back if it is still live and the caller's, and wakes waiters.
-- KEYS[1] expiry set, KEYS[2] info hash, KEYS[3..] bookkeeping to drop with
-- the last share (the semaphore's limit); ARGV[1] owner value, ARGV[2] channel (in the keys' slot), ARGV[3]
-- PUBLISH, or SPUBLISH in a Redis Cluster
-- Returns 1 when released, 0 when the share was gone or had expired.
local now = now_ms()
local expires = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not expires then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('ZCOUNT', KEYS[1], now, '+inf') == 0 then
  for i = 2, #KEYS do
    redis.call('DEL', KEYS[i])
  end
  redis.call('DEL', KEYS[1])
end
redis.call(ARGV[3], ARGV[2], 'released')
if expires > now then
  return 1
end
return 0
