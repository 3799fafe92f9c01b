-- Fence::read. KEYS[1] the resource.
-- Returns {'string', value}, {'hash', field, value, ...}, {'none'}, or {type}
-- for a key of any other type.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  return {kind, redis.call('GET', KEYS[1])}
end
if kind == 'hash' then
  local reply = redis.call('HGETALL', KEYS[1])
  table.insert(reply, 1, kind)
  return reply
end
return {kind}
