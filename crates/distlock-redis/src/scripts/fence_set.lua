-- FencedWrite::Set. ARGV[2] the value, ARGV[3] its expiry in milliseconds ('':
-- none). SET replaces a value of any type. Returns {'ok', ''}.
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
admit()
return {'ok', ''}
