#!/usr/bin/env bash
# Start what the test suite needs and a fresh machine may lack: memcached (installed
# from Debian's packages when missing). MariaDB and Redis are expected to run already;
# the tests themselves fail loudly under CI=true when a server cannot be reached.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! port_open 11211; then
  if ! command -v memcached >/dev/null 2>&1; then
    echo "memcached missing: installing it from Debian's packages" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq memcached >/dev/null
  fi
  memcached -d -u "$(id -un)" -l 127.0.0.1 -p 11211 -m 64
  for _ in $(seq 50); do port_open 11211 && break; sleep 0.1; done
fi
port_open 11211 || { echo "memcached did not start on 127.0.0.1:11211" >&2; exit 1; }
