-- An operator's delete of live shares behind their holders' backs, waking
-- waiters. KEYS[1] expiry set, KEYS[2] info hash; ARGV[1] channel (in the keys'
-- slot), ARGV[2] PUBLISH, or SPUBLISH in a Redis Cluster, ARGV[3..] owner
-- values to delete (none: every share)
-- Returns how many live shares were deleted.
local now = now_ms()
local members = {}
if #ARGV > 2 then
  for i = 3, #ARGV do
    members[#members + 1] = ARGV[i]
  end
else
  members = redis.call('ZRANGE', KEYS[1], 0, -1)
end
local deleted = 0
for _, member in ipairs(members) do
  local expires = tonumber(redis.call('ZSCORE', KEYS[1], member))
  if expires then
    redis.call('ZREM', KEYS[1], member)
    redis.call('HDEL', KEYS[2], member)
    if expires > now then
      deleted = deleted + 1
    end
  end
end
if deleted > 0 then
  redis.call(ARGV[2], ARGV[1], 'released')
end
return deleted
