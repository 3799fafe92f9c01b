-- Takes the lock if it is free and returns a fresh fencing token; otherwise says
-- how long the holder's lease has left, so the waiter can bound its sleep.
-- KEYS[1] lock key, KEYS[2] fence counter (never expires),
-- KEYS[3] restart-guard marker of the namespace (only when a guard is set)
-- ARGV[1] owner value (random per attempt), ARGV[2] ttl in milliseconds,
-- ARGV[3] guard in milliseconds, ARGV[4] the run_id of the caller's connection
-- ('' when the server did not tell it)
-- Returns {1, token} when won, {0, pttl} when held (pttl -1: the key has no
-- expiry), {2, ms} when the restart guard refuses for ms more.
if KEYS[3] then
  -- The restart guard: a server that may have lost locks it granted grants none
  -- until the guard has passed since then, by its own clock. The marker
  -- {run_id, until} never expires: without it the server lost its data (or is
  -- new); with another process's run_id it restarted or a replica took over.
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local guard = tonumber(ARGV[3])
  local marker = redis.call('HMGET', KEYS[3], 'run_id', 'until')
  local until_ms = tonumber(marker[2])
  local moved = ARGV[4] ~= '' and marker[1] and marker[1] ~= '' and marker[1] ~= ARGV[4]
  if not until_ms or moved then
    local info = redis.pcall('INFO', 'server')
    if type(info) ~= 'string' then
      info = ''
    end
    local uptime = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    if not until_ms and uptime then
      -- Every lease of a previous process was renewed before it died, which was
      -- before this one started: none outlives start + guard. The start is
      -- known to the second; the extra second keeps the bound on the safe side.
      until_ms = math.max(now, (tonumber(time[1]) - uptime + 1) * 1000 + guard)
    else
      -- Another process wrote the marker (a restart that kept the data, or a
      -- failover): when its leases were last renewed is unknown, so from now.
      until_ms = now + guard
    end
    local run_id = string.match(info, 'run_id:(%x+)') or ''
    redis.call('HSET', KEYS[3], 'run_id', run_id, 'until', string.format('%d', until_ms))
  end
  if now < until_ms then
    return {2, until_ms - now}
  end
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    -- A counter lost with a restart starts again from the server clock in
    -- microseconds, which is above every token handed out before as long as the
    -- clock did not step back and there was less than one acquisition per
    -- microsecond on average. Built as a string: Lua would print the number
    -- in exponent notation.
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  return {1, redis.call('INCR', KEYS[2])}
end
-- The same attempt sent again (its first reply was lost with a dead connection)
-- finds its own owner value: it won, and nobody can have moved the counter since.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, redis.call('GET', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
