#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the store tests and tell the caller its URL.
#
# Why a private cluster rather than the distribution's "main" one: CI runs as root on a clean
# clone, with no service manager, and the tests must never touch a database someone cares
# about. So this script installs Debian's server package when it is missing, creates a fresh
# cluster in a temporary folder owned by the "postgres" user (initdb refuses to run as root),
# starts it on 127.0.0.1 at a free port with durability switched off (it is thrown away), and
# creates the database "dsmon_test".
#
# Usage:
#   eval "$(scripts/start-postgres.sh)"     # exports DSMON_TEST_PG_URL and DSMON_TEST_PG_DIR
#   source scripts/start-postgres.sh        # same, in the current shell
#   scripts/start-postgres.sh --stop DIR    # stop the cluster started in DIR and remove DIR
#
# Everything but the final export lines goes to stderr, so `eval "$(...)"` sees only those.

_dsmon_pg_main() {

  _dsmon_pg_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
  }

  _dsmon_pg_as_owner() {
    # initdb and postgres refuse to run as root: run them as the "postgres" user then.
    if [ "$(id -u)" = 0 ]; then
      runuser -u postgres -- "$@"
    else
      "$@"
    fi
  }

  if [ "${1:-}" = "--stop" ]; then
    local dir=${2:?"--stop needs the cluster folder (DSMON_TEST_PG_DIR)"}
    _dsmon_pg_as_owner "$(_dsmon_pg_bin)/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 2>&1 || true
    rm -rf "$dir"
    return 0
  fi

  local bin
  bin=$(_dsmon_pg_bin)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "start-postgres: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 2>&1 || return 1
    apt-get install -y -q --no-install-recommends postgresql >&2 2>&1 || return 1
    bin=$(_dsmon_pg_bin)
  fi
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "start-postgres: no initdb after installing postgresql" >&2
    return 1
  fi

  local dir port
  dir=$(mktemp -d /tmp/dsmon-pg.XXXXXX) || return 1
  mkdir -p "$dir/sock"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" postgres
    chown -R postgres: "$dir"
  fi
  chmod 700 "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

  _dsmon_pg_as_owner "$bin/initdb" -D "$dir/data" -U dsmon -A trust -E UTF8 --no-sync \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  _dsmon_pg_as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >&2 2>&1 || { cat "$dir/server.log" >&2; return 1; }
  _dsmon_pg_as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U dsmon dsmon_test >&2 2>&1 || return 1

  DSMON_TEST_PG_URL="postgresql://dsmon@127.0.0.1:$port/dsmon_test"
  DSMON_TEST_PG_DIR="$dir"
  export DSMON_TEST_PG_URL DSMON_TEST_PG_DIR
  echo "start-postgres: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') at $DSMON_TEST_PG_URL (folder $dir)" >&2
  echo "export DSMON_TEST_PG_URL=$DSMON_TEST_PG_URL"
  echo "export DSMON_TEST_PG_DIR=$DSMON_TEST_PG_DIR"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  _dsmon_pg_main "$@"
else
  _dsmon_pg_main "$@" >/dev/null
fi
