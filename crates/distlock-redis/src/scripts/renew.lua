-- Extends the lock only if the caller still owns it, and keeps its fence
-- counter at least the new ttl plus state_ttl (token_lib.lua is prepended).
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner value, ARGV[2] ttl in
-- milliseconds, ARGV[3] how long the counter is kept in ms
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  keep_for(KEYS[2], ARGV[3])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
