#!/usr/bin/env bash
# Start what the test suite needs and a fresh machine may lack: memcached and Debian's
# chromium (installed from Debian's packages when missing; the dashboard is tested in a
# real browser), and MariaDB, Redis and PostgreSQL when installed but not running; and
# PostgreSQL's prepared transactions, which its default leaves off.
# Whatever still cannot be reached makes this script fail, so `make test` stops loudly.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_updated=""
apt_install() {
  echo "$1 missing: installing ${*:2} from Debian's packages" >&2
  [ -n "$apt_updated" ] || { $SUDO apt-get update -qq >/dev/null; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${@:2}" >/dev/null
}
wait_port() { for _ in $(seq 100); do port_open "$1" && return 0; sleep 0.1; done; return 1; }
# start NAME PORT COMMAND...: run COMMAND when nothing listens on PORT, then insist.
start() {
  local name=$1 port=$2; shift 2
  if ! port_open "$port"; then
    if command -v "$1" >/dev/null 2>&1; then
      echo "$name not listening on 127.0.0.1:$port: starting it" >&2
      "$@" >/dev/null 2>&1 || true
      wait_port "$port" || true
    fi
  fi
  port_open "$port" || { echo "$name is not reachable on 127.0.0.1:$port" >&2; exit 1; }
}

command -v memcached >/dev/null 2>&1 || port_open 11211 || apt_install memcached memcached
start memcached 11211 memcached -d -u "$(id -un)" -l 127.0.0.1 -p 11211 -m 64
start MariaDB 3306 start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
start Redis 6379 redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" \
  --appendonly no --logfile /tmp/batchy-redis.log
pg_version="$(ls /etc/postgresql 2>/dev/null | head -1)"
start PostgreSQL 5432 pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start
# The job store's migration tests hold its tables with a prepared transaction
# (PREPARE TRANSACTION), which PostgreSQL refuses until max_prepared_transactions is
# set; the setting takes a restart, so this restarts the server once.
pg() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc "$1"; }
if [ "$(pg 'SHOW max_prepared_transactions')" = 0 ]; then
  command -v pg_ctlcluster >/dev/null 2>&1 || {
    echo "PostgreSQL refuses prepared transactions: set max_prepared_transactions = 10" \
      "in its configuration and restart it" >&2
    exit 1
  }
  echo "PostgreSQL: max_prepared_transactions is 0: setting it to 10 and restarting it" >&2
  pg "ALTER SYSTEM SET max_prepared_transactions = 10"
  pg_ctlcluster --skip-systemctl-redirect "$pg_version" main restart
  wait_port 5432 || { echo "PostgreSQL did not come back after its restart" >&2; exit 1; }
fi
command -v chromium >/dev/null 2>&1 || apt_install chromium chromium chromium-driver
