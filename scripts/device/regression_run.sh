#!/usr/bin/env bash
# Runs on the GPU machine: every GPU test of the bundle and the benchmarks whose figures docs/benchmarks.md
# keeps, so that a change can show the GPU's behaviour and speed are what they were. With OLD_BUNDLE (a
# bundle of the binaries before the change) every benchmark runs new / old / new in the same call, so the
# A/B's spread is measured with it. Logs and a summary go to $OUT.
# Usage there: bash scripts/device/regression_run.sh BUNDLE [tests|attention|engine|all] [OLD_BUNDLE]
#   tests: every *_test binary (gpu_run.sh); attention: decode (graph, cold-clean) and prefill attention,
#   with the PyTorch peers; engine: decode latency at batch 1/8/32 and offline throughput of dummy:llama3-8b.
set -uo pipefail
bundle=$1
what=${2:-all}
old=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
status=0
if [[ $what == tests || $what == all ]]; then
  bash "$here/gpu_run.sh" "$bundle" tests 240 || status=1
  cp "$OUT/logs.tgz" "$OUT/test-logs.tgz" 2>/dev/null
fi
run() {  # label, binary dir, arguments...
  local label=$1 dir=$2
  shift 2
  echo "== $label: $*" | tee -a "$OUT/bench.txt"
  (source "$dir/../env.sh" && timeout 300 "$dir/$@") 2>&1 | grep -v "^\[\|INFO\|WARNING" | tee -a "$OUT/bench.txt" | tail -30
}
ab() {  # label, arguments...: new, old, new
  local label=$1
  shift
  run "$label new" "$bundle/bin" "$@"
  [[ -n $old ]] || return 0
  run "$label old" "$old/bin" "$@"
  run "$label new" "$bundle/bin" "$@"
}
if [[ $what == attention || $what == all ]]; then
  ab decode-graph attention_bench --backend all --only decode --graph
  ab decode-cold-clean attention_bench --backend triton --only decode --cold-clean
  ab prefill-fa3 attention_bench --backend flash3 --only prefill --cooldown 1000
  echo "== peers: attention_peers.py --only decode --graph" | tee -a "$OUT/bench.txt"
  env -u LD_LIBRARY_PATH timeout 300 python3 "$here/../../bench/peers/attention_peers.py" --only decode --graph 2>&1 \
    | grep -v Warning | tee -a "$OUT/bench.txt" | tail -20
fi
if [[ $what == engine || $what == all ]]; then
  for b in 1 8 32; do
    ab "latency-b$b" pagoda bench latency --model dummy:llama3-8b --input-len 128 --output-len 256 --batch-size "$b" \
      --num-iters 3
  done
  ab throughput pagoda bench throughput --model dummy:llama3-8b --num-prompts 1000 --input-len 512 --output-len 256
fi
exit $status
