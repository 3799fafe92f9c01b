-- FencedWrite::Delete: the value goes, the fence record stays. Returns {'ok', ''}.
redis.call('DEL', KEYS[1])
admit()
return {'ok', ''}
