#!/usr/bin/env bash
# Runs on the GPU machine: every GPU test of the bundle, then the benchmarks whose figures docs/benchmarks.md
# keeps (decode and prefill attention, decode latency and offline throughput of the Llama-3-8B-shaped model),
# so that a change can show the GPU's behaviour and speed are what they were. Logs and a summary go to $OUT.
# Usage there: bash scripts/device/regression_run.sh BUNDLE_DIR [SECONDS_PER_TEST_BINARY]
set -uo pipefail
bundle=$1
limit=${2:-240}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
bash "$(dirname "$0")/gpu_run.sh" "$bundle" tests "$limit"
status=$?
source "$bundle/env.sh"
B=$bundle/bin
run() {  # label, command...
  local label=$1
  shift
  echo "== $label: $*" | tee -a "$OUT/bench.txt"
  timeout 300 "$@" 2>&1 | grep -v "^\[" | tee -a "$OUT/bench.txt" | tail -40
}
run decode-graph "$B/attention_bench" --backend all --only decode --graph
run prefill-fa3 "$B/attention_bench" --backend flash3 --only prefill --cooldown 2000
run prefill-paged "$B/attention_bench" --backend triton --only prefill
for b in 1 8 32; do
  run "latency-b$b" "$B/pagoda" bench latency --model dummy:llama3-8b --input-len 128 --output-len 256 \
    --batch-size "$b" --num-iters 3
done
run throughput "$B/pagoda" bench throughput --model dummy:llama3-8b --num-prompts 1000 --input-len 512 \
  --output-len 256
exit $status
