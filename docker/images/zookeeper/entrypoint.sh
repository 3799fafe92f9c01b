#!/bin/bash
# Entrypoint of distlock/zookeeper. Takes the official zookeeper image's variables and
# command, so one compose service serves both. Unless $ZOO_CONF_DIR/zoo.cfg exists, it
# writes one from (defaults in brackets):
#   ZOO_TICK_TIME [2000]  ZOO_INIT_LIMIT [5]  ZOO_SYNC_LIMIT [2]  ZOO_MAX_CLIENT_CNXNS [60]
#   ZOO_STANDALONE_ENABLED [true]  ZOO_ADMINSERVER_ENABLED [false]
#   ZOO_AUTOPURGE_SNAPRETAINCOUNT [3]  ZOO_AUTOPURGE_PURGEINTERVAL [0]
#   ZOO_4LW_COMMANDS_WHITELIST  e.g. "srvr,mntr,ruok,conf"
#   ZOO_CFG_EXTRA         more "key=value" lines, separated by spaces
#   ZOO_CLIENT_PORT [2181]  the client port of the default one-server line
#   ZOO_SERVERS           an ensemble, separated by spaces:
#                         "server.1=zoo1:2888:3888;2181 server.2=zoo2:2888:3888;2181 ..."
#                         [server.1=localhost:2888:3888;$ZOO_CLIENT_PORT]
#   ZOO_MY_ID [1]         this server's id in ZOO_SERVERS (written to $ZOO_DATA_DIR/myid)
# Quorum ports listen on all addresses (quorumListenOnAllIPs), so ZOO_SERVERS can name
# every member by its hostname. The command then runs as given: `zkServer.sh
# start-foreground` (the default) starts the server in the foreground.
set -euo pipefail

conf_dir=${ZOO_CONF_DIR:-/conf}
data_dir=${ZOO_DATA_DIR:-/data}
data_log_dir=${ZOO_DATA_LOG_DIR:-/datalog}

[ $# -gt 0 ] || set -- zkServer.sh start-foreground

if [ ! -f "$conf_dir/zoo.cfg" ]; then
    mkdir -p "$conf_dir" "$data_dir" "$data_log_dir"
    {
        echo "dataDir=$data_dir"
        echo "dataLogDir=$data_log_dir"
        echo "tickTime=${ZOO_TICK_TIME:-2000}"
        echo "initLimit=${ZOO_INIT_LIMIT:-5}"
        echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
        echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
        echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}"
        echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
        echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
        echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
        echo "quorumListenOnAllIPs=true"
        for server in ${ZOO_SERVERS:-server.1=localhost:2888:3888;${ZOO_CLIENT_PORT:-2181}}; do
            echo "$server"
        done
        if [ -n "${ZOO_4LW_COMMANDS_WHITELIST:-}" ]; then
            echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        fi
        for entry in ${ZOO_CFG_EXTRA:-}; do
            echo "$entry"
        done
    } >"$conf_dir/zoo.cfg"
fi

if [ ! -f "$data_dir/myid" ]; then
    echo "${ZOO_MY_ID:-1}" >"$data_dir/myid"
fi

exec "$@"
