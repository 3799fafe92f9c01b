-- FencedWrite::Add. ARGV[2] the delta; ARGV[3] and ARGV[4] the lowest and the
-- highest value the delta can be added to without leaving i64; ARGV[5] with a
-- floor, the lowest value the delta may be added to (floor - delta, possibly
-- outside i64), '' without one. The caller computes the bounds exactly, so Lua
-- does no arithmetic: values are compared as canonical decimal text.
-- Returns {'added', before} (the caller adds the delta: INCRBY's own reply
-- would reach Lua as a double), {'floor', current} when the sum would be below
-- the floor (nothing written, the token recorded: its writer is the current
-- holder), {'notint', ''} or {'wrongtype', type} for a value that is not an
-- integer, and {'overflow', current} when the sum would leave i64. A missing
-- value counts as 0; INCRBY keeps an existing expiry.
local function unsigned_less(a, b)
  return #a < #b or (#a == #b and a < b)
end
local function less(a, b)
  local a_neg, b_neg = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if a_neg ~= b_neg then
    return a_neg
  end
  if a_neg then
    return unsigned_less(string.sub(b, 2), string.sub(a, 2))
  end
  return unsigned_less(a, b)
end
-- INCRBY's own rule (string2ll): canonical decimal within i64.
local function is_i64(s)
  if s ~= '0' and not string.match(s, '^%-?[1-9]%d*$') then
    return false
  end
  return not less(s, '-9223372036854775808') and not less('9223372036854775807', s)
end

local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' and current.err then
  if string.sub(current.err, 1, 9) == 'WRONGTYPE' then
    return {'wrongtype', redis.call('TYPE', KEYS[1]).ok}
  end
  return current
end
current = current or '0'
if not is_i64(current) then
  return {'notint', ''}
end
if less(current, ARGV[3]) or less(ARGV[4], current) then
  return {'overflow', current}
end
if ARGV[5] ~= '' and less(current, ARGV[5]) then
  admit()
  return {'floor', current}
end
redis.call('INCRBY', KEYS[1], ARGV[2])
admit()
return {'added', current}
