-- FencedWrite::HashSet. ARGV[2] the field, ARGV[3] its value.
-- Returns {'ok', ''}, or {'wrongtype', type} when the key holds no hash.
local done = redis.pcall('HSET', KEYS[1], ARGV[2], ARGV[3])
if type(done) == 'table' and done.err then
  if string.sub(done.err, 1, 9) == 'WRONGTYPE' then
    return {'wrongtype', redis.call('TYPE', KEYS[1]).ok}
  end
  return done
end
admit()
return {'ok', ''}
