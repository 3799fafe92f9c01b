#!/bin/bash
# Entrypoint of distlock/mariadb. Takes the official mariadb image's variables, so one
# compose service serves both:
#   (nothing) | mariadbd [--opt]... | mysqld [--opt]... | --opt ...   the server
#   anything else                                       run as is (mariadb, bash, ...)
# On the first start (empty /var/lib/mysql) it creates the data directory and sets up,
# from the environment (MYSQL_* names are accepted too):
#   MARIADB_ROOT_PASSWORD      root's password, for root@localhost and root@'%' (required,
#                              unless MARIADB_ALLOW_EMPTY_ROOT_PASSWORD is set)
#   MARIADB_DATABASE           a database to create
#   MARIADB_USER, MARIADB_PASSWORD  a user with every privilege on MARIADB_DATABASE
# MARIADB_PORT (default 3306) is the port. The server listens on 0.0.0.0 and runs in the
# foreground; --opt arguments come after these settings, so they win.
set -euo pipefail

[ $# -gt 0 ] || set -- mariadbd
case "$1" in
    -*) set -- mariadbd "$@" ;;
    mysqld) shift; set -- mariadbd "$@" ;;
esac
[ "$1" = mariadbd ] || exec "$@"
shift

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock
root_password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
allow_empty=${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-${MYSQL_ALLOW_EMPTY_PASSWORD:-}}
database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
user=${MARIADB_USER:-${MYSQL_USER:-}}
password=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}

sql_string() {  # a quoted SQL string literal
    local s=${1//\\/\\\\}
    printf "'%s'" "${s//\'/\\\'}"
}
sql_name() {  # a quoted SQL identifier
    printf '`%s`' "${1//\`/\`\`}"
}

init=()
if [ ! -d "$datadir/mysql" ]; then
    if [ -z "$root_password" ] && [ -z "$allow_empty" ]; then
        echo "distlock/mariadb: set MARIADB_ROOT_PASSWORD (or MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1)" >&2
        exit 1
    fi
    echo "distlock/mariadb: initializing $datadir"
    mariadb-install-db --datadir="$datadir" --skip-test-db --skip-name-resolve >/dev/null
    # Run by the server before it takes its first connection, so no client ever sees
    # the server without these users and this database.
    init_file=/run/mysqld/distlock-init.sql
    (
        umask 077
        pw=$(sql_string "$root_password")
        {
            # Only root@localhost and root@'%' may match root: a root@127.0.0.1 or
            # root@<hostname> without this password would shadow root@'%'.
            echo "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host <> 'localhost');"
            echo "DELETE FROM mysql.proxies_priv WHERE User = '' OR (User = 'root' AND Host <> 'localhost');"
            echo "FLUSH PRIVILEGES;"
            echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $pw;"
            echo "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY $pw;"
            echo "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;"
            if [ -n "$database" ]; then
                echo "CREATE DATABASE IF NOT EXISTS $(sql_name "$database");"
            fi
            if [ -n "$user" ] && [ -n "$password" ]; then
                echo "CREATE USER IF NOT EXISTS $(sql_string "$user")@'%' IDENTIFIED BY $(sql_string "$password");"
                if [ -n "$database" ]; then
                    echo "GRANT ALL PRIVILEGES ON $(sql_name "$database").* TO $(sql_string "$user")@'%';"
                fi
            fi
            echo "FLUSH PRIVILEGES;"
        } >"$init_file"
    )
    init=(--init-file="$init_file")
fi

exec mariadbd --datadir="$datadir" --socket="$socket" --bind-address=0.0.0.0 \
    --port="${MARIADB_PORT:-3306}" --skip-name-resolve "${init[@]}" "$@"
