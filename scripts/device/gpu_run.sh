#!/usr/bin/env bash
# Runs on the GPU machine (tool `device`): the carried bundle's GPU tests and benchmarks, logs under $OUT.
# Usage there: bash scripts/device/gpu_run.sh BUNDLE_DIR [tests|bench|all]
set -uo pipefail
bundle=$1
what=${2:-all}
source "$bundle/env.sh"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$bundle/data}
export PAGODA_BIN=$bundle/bin/pagoda
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$OUT/gpu.txt"
status=0
if [[ $what == tests || $what == all ]]; then
  for t in "$bundle"/bin/*_test; do
    [[ -x $t ]] || continue
    name=$(basename "$t")
    echo "=== $name"
    "$t" --gtest_brief=1 >"$OUT/$name.log" 2>&1
    rc=$?
    grep -E "^\[(attention|gpu-greedy)\]|PASSED|FAILED|Failure|error|Skipped" "$OUT/$name.log" | head -60
    [[ $rc -eq 0 ]] || status=1
  done
fi
if [[ $what == bench || $what == all ]]; then
  for b in "$bundle"/bin/*_bench; do
    [[ -x $b ]] || continue
    echo "=== $(basename "$b")"
    "$b" 2>&1 | tee "$OUT/$(basename "$b").log"
  done
  for py in bench/peers/*.py; do
    echo "=== $py"
    PYTHONUNBUFFERED=1 python3 "$py" 2>&1 | grep -v Warning | tee "$OUT/$(basename "$py" .py).log"
  done
fi
exit $status
