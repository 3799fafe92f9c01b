# Sourced by scripts/test-compose (its tcp, fail and log) once compose.yml is up:
# the server's INFO banner on the published port, with JetStream on.
local info
info=$(tcp 127.0.0.1 14222 'PING\r\n' | tr -d '\r' | sed -n 's/^INFO //p')
[ -n "$info" ] || fail "127.0.0.1:14222 sent no INFO banner" || return 1
grep -q '"jetstream":true' <<<"$info" || fail "127.0.0.1:14222: JetStream is off (the compose command was not applied)" || return 1
log "$current: nats-server $(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' <<<"$info") with JetStream on 127.0.0.1:14222"
