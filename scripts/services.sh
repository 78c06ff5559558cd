#!/usr/bin/env bash
# Makes sure PostgreSQL and Redis run on 127.0.0.1 for mail-worker's tests and demo.
# Idempotent: starts them if installed but stopped, installs them from Debian's packages if
# missing (needs root). Prints what it did. Then the tests' Python packages (scripts/test-deps.sh).
set -euo pipefail

say() { printf 'services: %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

wait_for() { # name check
  for _ in $(seq 1 60); do "$2" && return 0; sleep 0.5; done
  say "$1 did not come up"; return 1
}

apt_updated=0
install() {
  # Wait for dpkg's lock if another apt-get holds it (a second CI run, unattended upgrades).
  if [ "$apt_updated" -eq 0 ]; then as_root apt-get -o DPkg::Lock::Timeout=600 update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
}

# PostgreSQL
if command -v pg_isready >/dev/null && pg_up; then
  say "PostgreSQL already running on 127.0.0.1:5432"
else
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    say "installing PostgreSQL from Debian's packages"
    install postgresql postgresql-client
  fi
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  conf=/etc/postgresql/$ver/main
  # Trust local loopback connections (a throwaway test server, never production).
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$conf/pg_hba.conf"
  fi
  say "starting PostgreSQL $ver"
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  wait_for PostgreSQL pg_up
  say "PostgreSQL running on 127.0.0.1:5432"
fi

# Redis
if command -v redis-cli >/dev/null && redis_up; then
  say "Redis already running on 127.0.0.1:6379"
else
  if ! command -v redis-server >/dev/null; then
    say "installing Redis from Debian's packages"
    install redis-server redis-tools
  fi
  say "starting Redis (no persistence)"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for Redis redis_up
  say "Redis running on 127.0.0.1:6379"
fi

# The tests' Python packages (redis, standardwebhooks), in a venv under target/: installed
# here, at setup, so `cargo test` itself needs no network.
"$(dirname "$0")/test-deps.sh"
