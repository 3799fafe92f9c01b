#!/bin/bash
# Entrypoint of distlock/postgres. Takes the official postgres image's variables, so
# one compose service serves both:
#   (nothing) | postgres [-c opt=v]... | -c opt=v ...   the server
#   anything else                                       run as is (psql, initdb, bash, ...)
# On the first start (empty $PGDATA) it runs initdb and sets up, from the environment:
#   POSTGRES_PASSWORD   the superuser's password (required, unless
#                       POSTGRES_HOST_AUTH_METHOD=trust)
#   POSTGRES_USER       the superuser's name (default postgres)
#   POSTGRES_DB         a database it owns (default: POSTGRES_USER)
# The server listens on every interface on port 5432 (PGPORT to change it); arguments
# come after these settings, so they win.
set -euo pipefail

[ $# -gt 0 ] || set -- postgres
case "$1" in
    -*) set -- postgres "$@" ;;
esac
[ "$1" = postgres ] || exec "$@"
shift

user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}

sql_string() {  # a quoted SQL string literal
    printf "'%s'" "${1//\'/\'\'}"
}
sql_name() {  # a quoted SQL identifier
    printf '"%s"' "${1//\"/\"\"}"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
        echo "distlock/postgres: set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)" >&2
        exit 1
    fi
    echo "distlock/postgres: initializing $PGDATA"
    initdb -D "$PGDATA" -U "$user" -E UTF8 --locale=C --auth-local=trust --auth-host="$auth" >/dev/null
    echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
    # Set up over the Unix socket only, before the server listens on the network, so
    # no client ever sees it without this password and database.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    {
        if [ -n "${POSTGRES_PASSWORD:-}" ]; then
            echo "ALTER ROLE $(sql_name "$user") PASSWORD $(sql_string "$POSTGRES_PASSWORD");"
        fi
        if [ "$database" != postgres ]; then
            echo "CREATE DATABASE $(sql_name "$database") OWNER $(sql_name "$user");"
        fi
    } | psql -X -q -v ON_ERROR_STOP=1 -U "$user" -d postgres
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' -p "${PGPORT:-5432}" "$@"
