-- Redlock: raises a node's fence counter to at least the token just handed out,
-- so that any later majority, which meets this node, hands out a greater one.
-- KEYS[1] fence counter; ARGV[1] the token, in decimal
-- Counters are canonical decimal integers, so comparing length then text is exact
-- where Lua numbers (doubles) would not be.
local current = redis.call('GET', KEYS[1])
local target = ARGV[1]
if not current or #current < #target or (#current == #target and current < target) then
  redis.call('SET', KEYS[1], target)
end
return 1
