#!/bin/bash
# Entrypoint of distlock/redis. Takes what the official redis image takes, so one
# compose `command:` serves both:
#   (nothing)                          redis-server with the defaults below
#   redis-server [FILE.conf] [--opt v]...  the server; --opt v after the defaults, so they win
#   --opt v ... | FILE.conf ...        the same, redis-server implied
#   redis-sentinel [FILE.conf] [--opt v]...  a sentinel (a config is generated when none is given)
#   anything else                      run as is (redis-cli, bash, ...)
# Without a config file the server listens on 0.0.0.0 with protected mode off and keeps
# its files in /data, as the official image does. Environment (all optional):
#   REDIS_PORT            server port (default 6379)
#   REDIS_APPENDONLY      yes|no: append-only persistence (default: Redis's, no)
#   REDIS_ARGS            more server options, split on spaces ("--maxmemory-policy noeviction")
#   SENTINEL_PORT         sentinel port (default 26379)
#   SENTINEL_MONITOR      "NAME HOST PORT QUORUM": the master the generated sentinel config watches
#   SENTINEL_DOWN_AFTER_MS       down-after-milliseconds for it (default 5000)
#   SENTINEL_FAILOVER_TIMEOUT_MS failover-timeout for it (default 60000)
set -euo pipefail

[ $# -gt 0 ] || set -- redis-server
case "$1" in
    -*|*.conf) set -- redis-server "$@" ;;
esac

env_options() {
    options=()
    [ -z "${REDIS_PORT:-}" ] || options+=(--port "$REDIS_PORT")
    [ -z "${REDIS_APPENDONLY:-}" ] || options+=(--appendonly "$REDIS_APPENDONLY")
    if [ -n "${REDIS_ARGS:-}" ]; then
        local extra
        read -r -a extra <<<"$REDIS_ARGS"
        options+=("${extra[@]}")
    fi
}

case "$1" in
redis-server)
    shift
    env_options
    if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        # A config file: it decides, the environment and the arguments add to it.
        conf=$1
        shift
        exec redis-server "$conf" "${options[@]}" "$@"
    fi
    exec redis-server --bind 0.0.0.0 --protected-mode no --port 6379 --dir /data \
        "${options[@]}" "$@"
    ;;
redis-sentinel)
    shift
    if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        exec redis-sentinel "$@"
    fi
    # Sentinel rewrites its config file, so it lives in the writable /data.
    conf=/data/sentinel.conf
    if [ ! -f "$conf" ]; then
        {
            echo "port ${SENTINEL_PORT:-26379}"
            echo "bind 0.0.0.0"
            echo "protected-mode no"
            echo "dir /data"
            echo "sentinel resolve-hostnames yes"
            if [ -n "${SENTINEL_MONITOR:-}" ]; then
                read -r name host port quorum <<<"$SENTINEL_MONITOR"
                echo "sentinel monitor $name $host $port $quorum"
                echo "sentinel down-after-milliseconds $name ${SENTINEL_DOWN_AFTER_MS:-5000}"
                echo "sentinel failover-timeout $name ${SENTINEL_FAILOVER_TIMEOUT_MS:-60000}"
            fi
        } >"$conf"
    fi
    exec redis-sentinel "$conf" "$@"
    ;;
*)
    exec "$@"
    ;;
esac
