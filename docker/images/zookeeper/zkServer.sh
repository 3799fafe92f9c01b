#!/bin/bash
# zkServer.sh (and, through a link, zkCli.sh) of distlock/zookeeper: the part of
# ZooKeeper's scripts that a container uses, over Debian's libzookeeper-java.
#   zkServer.sh start-foreground [CFG]  the server in the foreground
#   zkServer.sh status [CFG]            asks the client port `srvr`; prints the Mode,
#                                       exits 1 when the server does not serve
#   zkServer.sh print-cmd [CFG]         the server's java command line
#   zkServer.sh version
#   zkCli.sh [-server HOST:PORT] [CMD]  ZooKeeper's command-line client
# CFG is a file name in $ZOO_CONF_DIR (default zoo.cfg) or a path. JVMFLAGS and
# SERVER_JVMFLAGS add JVM options; ZK_SERVER_HEAP is the server's heap in MB (1000),
# as in ZooKeeper's own scripts. The log goes to stderr (slf4j-simple).
set -euo pipefail

conf_dir=${ZOO_CONF_DIR:-/conf}
classpath="$conf_dir:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
read -r -a jvm_flags <<<"${JVMFLAGS:-}"

if [ "$(basename "$0")" = zkCli.sh ]; then
    exec java "${jvm_flags[@]}" -cp "$classpath" org.apache.zookeeper.ZooKeeperMain "$@"
fi

cfg=${2:-zoo.cfg}
case "$cfg" in */*) ;; *) cfg=$conf_dir/$cfg ;; esac

read -r -a server_flags <<<"${SERVER_JVMFLAGS:-}"
server=(java "-Xmx${ZK_SERVER_HEAP:-1000}m" "-Dzookeeper.log.dir=${ZOO_LOG_DIR:-/logs}"
        -XX:+HeapDumpOnOutOfMemoryError -XX:OnOutOfMemoryError='kill -9 %p'
        "${server_flags[@]}" "${jvm_flags[@]}"
        -cp "$classpath" org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg")

# The client port: clientPort=, else this server's line (server.<myid>=...;[addr:]port).
client_port() {
    local port myid
    port=$(sed -n 's/^[[:space:]]*clientPort[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$cfg" | tail -n1)
    if [ -z "$port" ]; then
        myid=$(cat "$(sed -n 's/^[[:space:]]*dataDir[[:space:]]*=[[:space:]]*//p' "$cfg" | tail -n1)/myid" 2>/dev/null || echo 1)
        port=$(sed -n "s/^[[:space:]]*server\.${myid}[[:space:]]*=.*;\(.*:\)\{0,1\}\([0-9]*\)[[:space:]]*$/\2/p" "$cfg" | tail -n1)
    fi
    echo "${port:-2181}"
}

case "${1:-}" in
start-foreground)
    [ -f "$cfg" ] || { echo "zkServer.sh: no config at $cfg" >&2; exit 1; }
    exec "${server[@]}"
    ;;
status)
    port=$(client_port)
    mode=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && echo srvr >&3 && grep '^Mode: ' <&3) || {
        echo "Error contacting service on port $port. It is probably not running."
        exit 1
    }
    echo "$mode"
    ;;
print-cmd)
    printf '%q ' "${server[@]}"
    echo
    ;;
version)
    exec java -cp "$classpath" org.apache.zookeeper.version.VersionInfoMain
    ;;
*)
    echo "Usage: zkServer.sh {start-foreground|status|print-cmd|version} [CFG]" >&2
    exit 2
    ;;
esac
