#!/usr/bin/env bash
# A throwaway PostgreSQL server for the history store's tests (Debian's postgresql package).
#   ci/postgres.sh start DIR   initdb in DIR, start on a free loopback port, print the URL
#   ci/postgres.sh stop DIR    stop it and remove DIR
# initdb and the server refuse to run as root: as root they run as the postgres user.
set -euo pipefail

bin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "ci/postgres.sh: no PostgreSQL server found under /usr/lib/postgresql (apt-get install postgresql)" >&2
    exit 1
fi
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cmd=${1:?usage: ci/postgres.sh start|stop DIR}
dir=${2:?usage: ci/postgres.sh start|stop DIR}
case "$cmd" in
start)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U opperf --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off" start >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://opperf@127.0.0.1:$port/postgres"
    ;;
stop)
    if [ -d "$dir/data" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "ci/postgres.sh: unknown command $cmd (expected start|stop)" >&2
    exit 1
    ;;
esac
