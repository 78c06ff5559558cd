#!/usr/bin/env bash
# The `paced` script behind a backlog past the day budget, in Redis alone (BENCHMARKS.md §13):
# `redis-benchmark EVALSHA` of lua/paced/check_and_reserve.lua at commit BEFORE (default
# b5148e8, before issue 23) and of the working tree's, side by side with fixed-window's script,
# on one mailbox (25/min, D = 9,000), the caller's clock frozen, a new message id per call
# (`__rand_int__`, 1 in 10^9: a repeat is rare), so every call books behind the backlog. At each level in LEVELS (default
# "0 10000 20000"; the script before walks every bucket, so 100,000 takes it hours) the next
# DECISIONS (default 2000) calls are measured: Redis commands per decision and usec_per_call
# from INFO commandstats. Resets INFO commandstats of the Redis at REDIS_URL (default
# 127.0.0.1:6379: use a private one); keys under bench:daycost:*, deleted after each run.
#   crates/bench/day-backlog-script-cost.sh [BEFORE] ["LEVELS"] [DECISIONS]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
before=${1:-b5148e8}
levels=${2:-0 10000 20000}
decisions=${3:-2000}
url=${REDIS_URL:-redis://127.0.0.1:6379}
cli() { redis-cli -u "$url" "$@"; }
now=$(date +%s%3N)
paced_run() { # label sha
  local p="bench:daycost:$1:{contoso.example}" k made=0 level
  k="$p:backlog@contoso.example"
  cli HSET "$k" seeded 1 total 0 hs 1 bmin - >/dev/null
  call() { # n
    [ "$1" -gt 0 ] || return 0
    redis-benchmark -u "$url" -c 16 -n "$1" -r 1000000000 -P 1 -q EVALSHA "$2" 7 "$k" "$k:days" \
      "$k:booked" "$k:sent" "$k:inflight" "$p:tenant" "$p:tenant:days" \
      "$now" "m-__rand_int__" 25 9000 1 0 0 1000000 15000 2000 900000 >/dev/null
  }
  for level in $levels; do
    call $((level - made)) "$2"; made=$level
    cli CONFIG RESETSTAT >/dev/null
    call "$decisions" "$2"; made=$((made + decisions))
    cli INFO commandstats | awk -F'[:,=]' -v label="$1" -v level="$level" -v n="$decisions" '
      /^cmdstat_evalsha/ {usec = $7}
      /^cmdstat_/ && !/evalsha|config|info/ {inner += $3}
      END {printf "%-14s at %6d booked: %7.1f commands/decision, %8.1f usec/call\n", label, level, inner / n, usec}'
  done
  cli --scan --pattern "bench:daycost:$1:*" | xargs -r -n 1000 redis-cli -u "$url" UNLINK >/dev/null
}
old=$(cli SCRIPT LOAD "$(git show "$before:lua/paced/check_and_reserve.lua")")
new=$(cli SCRIPT LOAD "$(cat lua/paced/check_and_reserve.lua)")
fixed=$(cli SCRIPT LOAD "$(cat lua/fixed_window/check_and_reserve.lua)")
paced_run before "$old"
paced_run after "$new"
cli CONFIG RESETSTAT >/dev/null
redis-benchmark -u "$url" -c 16 -n "$decisions" -P 1 -q EVALSHA "$fixed" 2 \
  "bench:daycost:f:{backlog@contoso.example}:m" "bench:daycost:f:{backlog@contoso.example}:d" \
  25 9000 1 30000 40000000 >/dev/null
cli INFO commandstats | awk -F'[:,=]' -v n="$decisions" '
  /^cmdstat_evalsha/ {usec = $7}
  /^cmdstat_/ && !/evalsha|config|info/ {inner += $3}
  END {printf "%-14s (denials): %7.1f commands/decision, %8.1f usec/call\n", "fixed-window", inner / n, usec}'
cli --scan --pattern "bench:daycost:f:*" | xargs -r -n 1000 redis-cli -u "$url" UNLINK >/dev/null
