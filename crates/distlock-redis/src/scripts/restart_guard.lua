-- The restart guard, prepended to the acquire scripts of the lock, the
-- semaphore and the read-write lock: a server that may have lost what it
-- granted in a namespace (locks, permits, shares) grants nothing there until
-- the guard has passed since then, by its own clock. The marker
-- {run_id, until} never expires: without it the server lost its data (or is
-- new); with another process's run_id it restarted or a replica took over.
-- marker: the namespace's marker key (nil: the client has no guard); guard:
-- the guard in ms (a string from ARGV); run_id: the run_id of the caller's
-- connection ('' when the server did not tell it). Returns how many ms the
-- guard still refuses, 0 once passed (or without a guard).
local function restart_guard_left(marker, guard, run_id)
  if not marker then
    return 0
  end
  guard = tonumber(guard)
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local recorded = redis.call('HMGET', marker, 'run_id', 'until')
  local until_ms = tonumber(recorded[2])
  local moved = run_id ~= '' and recorded[1] and recorded[1] ~= '' and recorded[1] ~= run_id
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
    local server_run_id = string.match(info, 'run_id:(%x+)') or ''
    redis.call('HSET', marker, 'run_id', server_run_id, 'until', string.format('%d', until_ms))
  end
  return math.max(until_ms - now, 0)
end

