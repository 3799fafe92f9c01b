#!/bin/bash
# Entrypoint of distlock/etcd. Takes what the official etcd image runs, so one compose
# `command:` serves both:
#   (nothing) | etcd [--flag=value]...  etcd, with defaults for the flags not given
#   --flag=value ...                    the same, etcd implied
#   anything else                       run as is (etcdctl, bash, ...)
# etcd reads every flag from ETCD_<FLAG> too (ETCD_NAME, ETCD_INITIAL_CLUSTER,
# ETCD_INITIAL_CLUSTER_STATE, ETCD_INITIAL_CLUSTER_TOKEN, ...). For each flag below that
# is neither on the command line nor in the environment, this sets its default:
#   --logger                       zap
#   --name                         the container's hostname
#   --data-dir                     /etcd-data
#   --listen-client-urls           http://0.0.0.0:$ETCD_CLIENT_PORT
#   --advertise-client-urls        http://<hostname>:$ETCD_CLIENT_PORT
#   --listen-peer-urls             http://0.0.0.0:$ETCD_PEER_PORT
#   --initial-advertise-peer-urls  this member's URL in --initial-cluster when that is given,
#                                  else http://<hostname>:$ETCD_PEER_PORT
#   --initial-cluster              <name>=<initial advertise peer url>: a one-member cluster
# ETCD_CLIENT_PORT (default 2379) and ETCD_PEER_PORT (default 2380) are this script's.
# A cluster member: ETCD_NAME=etcd-1
#   ETCD_INITIAL_CLUSTER=etcd-1=http://etcd-1:2380,etcd-2=http://etcd-2:2380,etcd-3=http://etcd-3:2380
set -euo pipefail

client_port=${ETCD_CLIENT_PORT:-2379}
peer_port=${ETCD_PEER_PORT:-2380}
unset ETCD_CLIENT_PORT ETCD_PEER_PORT  # not etcd's own: it would warn about them

[ $# -gt 0 ] || set -- etcd
case "$1" in
    -*) set -- etcd "$@" ;;
esac
[ "$1" = etcd ] || exec "$@"

host=${HOSTNAME:-$(cat /etc/hostname)}

# setting FLAG: its value from the command line (--flag=v, --flag v, -flag=v) or the
# environment; fails when it is set nowhere.
setting() {
    local flag=$1 var i args=("${@:2}")
    for ((i = 0; i < ${#args[@]}; i++)); do
        case "${args[i]}" in
            --"$flag"=*|-"$flag"=*) echo "${args[i]#*=}"; return 0 ;;
            --"$flag"|-"$flag") echo "${args[i + 1]:-}"; return 0 ;;
        esac
    done
    var="ETCD_$(echo "$flag" | tr 'a-z-' 'A-Z_')"
    if [ -n "${!var:-}" ]; then echo "${!var}"; return 0; fi
    return 1
}

# default FLAG VALUE: export ETCD_<FLAG>=VALUE unless FLAG is set already. Through the
# environment, so the command line stays exactly as given.
default() {
    local flag=$1 value=$2
    setting "$flag" "${@:3}" >/dev/null && return 0
    export "ETCD_$(echo "$flag" | tr 'a-z-' 'A-Z_')=$value"
}

args=("${@:2}")
default logger zap "${args[@]}"  # etcd 3.4's default, capnslog, is deprecated
default name "$host" "${args[@]}"
default data-dir /etcd-data "${args[@]}"
default listen-client-urls "http://0.0.0.0:$client_port" "${args[@]}"
default advertise-client-urls "http://$host:$client_port" "${args[@]}"
default listen-peer-urls "http://0.0.0.0:$peer_port" "${args[@]}"
name=$(setting name "${args[@]}")
# A member of a given --initial-cluster advertises the peer URL listed there for it.
peer_url="http://$host:$peer_port"
if cluster=$(setting initial-cluster "${args[@]}"); then
    for member in ${cluster//,/ }; do
        [ "${member%%=*}" != "$name" ] || peer_url=${member#*=}
    done
fi
default initial-advertise-peer-urls "$peer_url" "${args[@]}"
peer_url=$(setting initial-advertise-peer-urls "${args[@]}")
default initial-cluster "$name=${peer_url%%,*}" "${args[@]}"

exec "$@"
