-- An operator's delete of live shares behind their holders' backs, waking
-- waiters. KEYS[1] expiry set, KEYS[2] info hash; ARGV[1] channel,
-- ARGV[2..] owner values to delete (none: every share)
-- Returns how many live shares were deleted.
local now = now_ms()
local members = {}
if #ARGV > 1 then
  for i = 2, #ARGV do
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
  redis.call('PUBLISH', ARGV[1], 'released')
end
return deleted
