#!/usr/bin/env bash
# Runs on the GPU machine (tool `device`): the bundle's GPU tests and benchmarks. Each binary runs under a
# time limit (a hang costs minutes of the session's device time otherwise); logs go to $OUT/logs.tgz (one
# file: the device returns at most 8) and a one-line summary per binary to stdout and $OUT/summary.txt.
# Usage there: bash scripts/device/gpu_run.sh BUNDLE_DIR [tests|bench|all] [SECONDS_PER_BINARY]
set -uo pipefail
bundle=$1
what=${2:-all}
limit=${3:-240}
source "$bundle/env.sh"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$bundle/data}
export PAGODA_BIN=$bundle/bin/pagoda
OUT=${OUT:-/tmp/out}
logs=$(mktemp -d)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/summary.txt"
status=0
summary() { echo "$1" | tee -a "$OUT/summary.txt"; }
if [[ $what == tests || $what == all ]]; then
  for t in "$bundle"/bin/*_test; do
    [[ -x $t ]] || continue
    name=$(basename "$t")
    timeout "$limit" "$t" --gtest_brief=1 >"$logs/$name.log" 2>&1
    rc=$?
    line=$(grep -E "^\[  (PASSED|FAILED)  \]" "$logs/$name.log" | tr '\n' ' ')
    [[ $rc -eq 124 ]] && line="TIMED OUT after ${limit}s ($line)"
    summary "$name rc=$rc $line"
    grep -E "Failure|Expected|Which is" "$logs/$name.log" | head -6
    [[ $rc -eq 0 ]] || status=1
  done
fi
if [[ $what == bench || $what == all ]]; then
  for b in "$bundle"/bin/*_bench; do
    [[ -x $b ]] || continue
    timeout "$limit" "$b" >"$logs/$(basename "$b").log" 2>&1
    summary "$(basename "$b") rc=$?"
    cat "$logs/$(basename "$b").log"
  done
  for py in bench/peers/*.py; do
    PYTHONUNBUFFERED=1 timeout "$limit" env -u LD_LIBRARY_PATH python3 "$py" 2>&1 | grep -v Warning \
      >"$logs/$(basename "$py" .py).log"
    summary "$py rc=${PIPESTATUS[0]}"
    cat "$logs/$(basename "$py" .py).log"
  done
fi
tar -C "$logs" -czf "$OUT/logs.tgz" .
exit $status
