-- The live shares of one primitive, for inspection.
-- KEYS[1] expiry set, KEYS[2] info hash
-- Returns {owner, description, owner, description, ...} of unexpired shares.
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%d', now), '+inf')
local out = {}
for _, member in ipairs(live) do
  out[#out + 1] = member
  out[#out + 1] = redis.call('HGET', KEYS[2], member) or ''
end
return out
