#!/usr/bin/env bash
# Runs on the GPU machine: the TurboQuant run of issue #27 from a bundle of scripts/device/make_bundle.sh.
# Sections (each fits one device call; `all` runs tests, bench and latency):
#   tests    the TurboQuant GPU tests (kernels and runner, the encoder) and the paged kernels and RoPE tests
#            they share code with
#   bench    turboquant_bench: decode over a paged cache, 32/8 heads, head 128, batch 1/16/64/128 x context
#            1k-32k, bf16 / fp8 / each preset, and each preset again with up to 64 KV splits (--split-cap 64:
#            is the default cap of 32 what holds batch 1 back?) (TB/s, tokens/s, ratio to bf16); CSV in $OUT
#   latency  `pagoda bench latency` on the Llama-3-8B shape (dummy weights), batch 32, 8k prompts, each KV dtype
#   model    greedy tokens of the built-in model on the GPU beside the CPU, each preset (needs the model file
#            under the bundle's data/models, brought separately as for scripts/device/gguf_run.sh)
# Logs go to $OUT (one directory, tarred to $OUT/turboquant-SECTION-logs.tgz), a summary to stdout and $OUT/summary.txt.
# Usage there: bash scripts/device/turboquant_run.sh BUNDLE [tests|bench|latency|model|all] [SECONDS_PER_BINARY]
set -uo pipefail
bundle=$1
what=${2:-all}
limit=${3:-300}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
logs=$(mktemp -d)
source "$bundle/env.sh"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$bundle/data}
export PAGODA_MODEL_CACHE=${PAGODA_MODEL_CACHE:-$bundle/data/models}
export PAGODA_BIN=$bundle/bin/pagoda
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/summary.txt"
status=0
summary() { echo "$1" | tee -a "$OUT/summary.txt"; }
presets="turboquant_k8v4 turboquant_4bit_nc turboquant_k3v4_nc turboquant_3bit_nc"

if [[ $what == tests || $what == all ]]; then
  for name in turboquant_gpu_test ops_cuda_rope_kv_turboquant_test ops_cuda_rope_kv_turboquant_emulation_test \
              ops_cuda_rope_kv_test paged_attention_gpu_test; do
    t=$bundle/bin/$name
    [[ -x $t ]] || { summary "$name MISSING from the bundle"; status=1; continue; }
    timeout "$limit" "$t" --gtest_brief=1 >"$logs/$name.log" 2>&1
    rc=$?
    line=$(grep -E "^\[  (PASSED|FAILED)  \]" "$logs/$name.log" | tr '\n' ' ')
    [[ $rc -eq 124 ]] && line="TIMED OUT after ${limit}s ($line)"
    summary "$name rc=$rc $line"
    grep -E "Failure|Expected|Which is|first:" "$logs/$name.log" | head -8
    grep -E "^\[turboquant\]" "$logs/$name.log" | sort -k8 -g | tail -3  # the closest to their bounds
    [[ $rc -eq 0 ]] || status=1
  done
fi

if [[ $what == bench || $what == all ]]; then
  OUT=$OUT timeout "$limit" "$bundle/bin/turboquant_bench" --split-cap 64 >"$logs/turboquant_bench.log" 2>&1
  rc=$?
  summary "turboquant_bench rc=$rc"
  cp "$logs/turboquant_bench.log" "$OUT/"
  # The acceptance rows: 32k context, every format, with the ratio to bf16.
  grep -E "^device|ctx= 32768|FAILED" "$logs/turboquant_bench.log"
  [[ $rc -eq 0 ]] || status=1
fi

if [[ $what == latency || $what == all ]]; then
  for kv in auto fp8 $presets; do
    timeout "$limit" "$bundle/bin/pagoda" bench latency --model dummy:llama3-8b --input-len 8192 --output-len 64 \
      --batch-size 32 --max-model-len 8448 --max-num-batched-tokens 16384 --num-iters 2 --kv-cache-dtype "$kv" \
      --output-json "$logs/latency-$kv.json" >"$logs/latency-$kv.log" 2>&1
    rc=$?
    summary "bench latency kv=$kv rc=$rc $(grep -iE "avg latency|tokens/s|KV cache" "$logs/latency-$kv.log" | tr '\n' ' ' | cut -c1-300)"
    [[ $rc -eq 0 ]] || { tail -3 "$logs/latency-$kv.log"; status=1; }
  done
fi

if [[ $what == model ]]; then
  bound=${TQ_MARGIN:-2.11}  # nats: a step whose CPU top-2 margin is below this may flip (see below)
  for kv in $presets; do
    for q in "What is the capital of Japan?" "Name three primary colors."; do
      for dev in cpu cuda; do
        timeout 120 "$bundle/bin/pagoda" generate --device "$dev" --prompt "$q" --temperature 0 --max-tokens 48 \
          --kv-cache-dtype "$kv" --logprobs 2 --output-json >"$logs/gen-$kv-$dev.json" 2>"$logs/gen-$kv-$dev.err" ||
          { tail -3 "$logs/gen-$kv-$dev.err"; status=1; }
      done
      python3 - "$logs/gen-$kv-cpu.json" "$logs/gen-$kv-cuda.json" "$kv: $q" "$bound" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
except Exception as e:
    print(f"{sys.argv[3]}: no result ({e})"); sys.exit(0)
bound = float(sys.argv[4])
for i, (a, b) in enumerate(zip(cpu["token_ids"], gpu["token_ids"])):
    top = cpu["logprobs"][i]
    margin = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf")
    if a != b:
        print(f"{sys.argv[3]}: first difference at step {i} (CPU margin {margin:.2f} nats): "
              f"{'ok (low margin)' if margin < bound else 'MISMATCH above the margin'}")
        break
else:
    print(f"{sys.argv[3]}: all {len(cpu['token_ids'])} tokens equal")
PY
    done
  done
fi
tar -C "$logs" -czf "$OUT/turboquant-$what-logs.tgz" .  # one archive per section: calls do not overwrite
exit $status
