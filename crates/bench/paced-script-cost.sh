#!/usr/bin/env bash
# The Redis CPU of one `paced` reservation (`usec_per_call` of `cmdstat_evalsha`), the script at
# commit BEFORE (default 76a7617, the caller's `now`) against the working tree's with
# ARGV[1]=TIME and with ARGV[1]=ms: redis-benchmark -c 1 -n 30000 -r 100000, 100,000 seeded
# mailboxes, ROUNDS rounds interleaved (BENCHMARKS.md 1c). Resets INFO commandstats of the
# Redis at REDIS_URL (default 127.0.0.1:6379); keys under bench:clock:*, deleted after each run.
#   crates/bench/paced-script-cost.sh [BEFORE] [ROUNDS]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
before=${1:-76a7617}
rounds=${2:-7}
cli() { redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379}" "$@"; }
old=$(cli SCRIPT LOAD "$(git show "$before:lua/paced/check_and_reserve.lua")")
new=$(cli SCRIPT LOAD "$(cat lua/paced/check_and_reserve.lua)")
id=6d61696c-2d77-6f72-6b65-722d62656e63
run() { # label sha now-argument round
  local p="bench:clock:$4$1" k
  seq -f "%012g" 0 99999 |
    awk -v p="$p" '{print "HSET " p ":{contoso.example}:bench" $1 "@bench.example seeded 1"}' |
    cli --pipe >/dev/null
  k="$p:{contoso.example}:bench__rand_int__@bench.example"
  cli CONFIG RESETSTAT >/dev/null
  redis-benchmark -u "${REDIS_URL:-redis://127.0.0.1:6379}" -c 1 -n 30000 -r 100000 -P 1 -q \
    EVALSHA "$2" 7 "$k" "$k:days" "$k:booked" "$k:sent" "$k:inflight" \
    "$p:{contoso.example}:tenant" "$p:{contoso.example}:tenant:days" \
    "$3" "$id" 25 9000 1 0 0 1000000 40000 2000 900000 >/dev/null
  echo "$1 $(cli INFO commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')"
  cli --scan --pattern "$p:*" | xargs -r -n 1000 redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379}" UNLINK >/dev/null
}
for round in $(seq "$rounds"); do
  run before "$old" "$(date +%s%3N)" "$round"
  run time "$new" TIME "$round"
  run caller "$new" "$(date +%s%3N)" "$round"
done | awk '{v[$1] = v[$1] " " $2} END {for (k in v) print k " (µs of Redis CPU per call):" v[k]}'
