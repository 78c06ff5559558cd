#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (cargo fuzz, libFuzzer) for SECONDS each (default 30) and
# fails on the first crash, leak or timeout. Installs cargo-fuzz from crates.io if missing.
#
#   scripts/fuzz.sh [SECONDS]        # e.g. scripts/fuzz.sh 30
#   FUZZ_TARGETS="senders answers" scripts/fuzz.sh 10
#
# Only a stable toolchain exists here; cargo-fuzz needs nightly flags (-Zsanitizer, …), which
# RUSTC_BOOTSTRAP=1 unlocks on stable. Seeds are fuzz/corpus/<target>/ (committed, small);
# what libFuzzer finds goes to fuzz/target/corpus/<target>/ (not committed); a crash input is
# written to fuzz/artifacts/<target>/ and printed. Each target's executions are printed at the
# end ("target: N executions in S s").
set -euo pipefail

SECONDS_PER_TARGET="${1:-30}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz from crates.io" >&2
  cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
TARGETS="${FUZZ_TARGETS:-$(cargo fuzz list)}"
# No address sanitizer: the crate forbids unsafe code, so ASan finds nothing a panic would not,
# and it triples build time and halves executions. Debug assertions (overflow checks) stay on.
FLAGS=(--sanitizer none --debug-assertions)

cargo fuzz build "${FLAGS[@]}"

summary=()
start=$(date +%s)
for target in $TARGETS; do
  work="$ROOT/fuzz/target/corpus/$target"
  mkdir -p "$work"
  log="$ROOT/fuzz/target/$target.log"
  echo "fuzz.sh: $target for ${SECONDS_PER_TARGET}s" >&2
  if ! cargo fuzz run "${FLAGS[@]}" "$target" "$work" "$ROOT/fuzz/corpus/$target" -- \
      -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz.sh: $target FAILED (log: $log; input in fuzz/artifacts/$target/)" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  summary+=("$target: $runs executions in ${SECONDS_PER_TARGET} s")
done
end=$(date +%s)
printf '%s\n' "${summary[@]}"
echo "fuzz.sh: all targets clean in $((end - start)) s (after the build)"
