-- Takes a waiting writer out of the queue (its wait ended or was dropped) and
-- wakes the readers it held back.
-- KEYS[1] waiting writers; ARGV[1] owner value, ARGV[2] channel
-- Returns 1 when there was a marker.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
