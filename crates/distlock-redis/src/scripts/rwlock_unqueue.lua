-- Takes a waiter out of the queue (its wait ended or was dropped) and wakes
-- those it held back.
-- KEYS[1] queue, KEYS[2] places; ARGV[1] the waiter's member ("R:<owner>" or
-- "W:<owner>"), ARGV[2] channel (in the keys' slot), ARGV[3] PUBLISH,
-- or SPUBLISH in a Redis Cluster
-- Returns 1 when there was a place.
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call(ARGV[3], ARGV[2], 'released')
  return 1
end
return 0
