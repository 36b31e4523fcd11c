#!/usr/bin/env bash
# Runs on the GPU machine: the quantized-weight run of issue #26. Every GPU test of the bundle; the built-in
# SmolLM2 model's greedy tokens on the GPU beside the CPU's (the bundle's data/models holds the file); the
# quantized GEMV beside bf16 cuBLASLt (quant_gemv_bench); and batch 1/8/32 decode of Llama-3-8B-shaped random
# models, bf16 vs Q4_K vs Q8_0. Logs and a summary go to $OUT.
# Usage there: bash scripts/device/gguf_run.sh BUNDLE [tests|smollm2|bench|all|gemv]
#   gemv: the quantized GEMV's own run: its GPU tests, quant_gemv_bench, Nsight Compute (warp stall reasons)
#   on two m = 1 cases, batch 1/8/32 decode; where the bundle holds bin/*-base (the same tools built from the commit
#   before the change), their bench and batch-1 decode too, in the same run.
#   stalls: the GEMV's GPU test, quant_gemv_bench, Nsight Compute's warp stall reasons of a few cases, and
#   batch-1 decode.
set -uo pipefail
bundle=$1
what=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# The built-in model file: too large to travel with the bundle, it is brought separately (docs/device-runs.md).
export PAGODA_MODEL_CACHE=${PAGODA_MODEL_CACHE:-$bundle/data/models}
status=0
if [[ $what == tests || $what == all ]]; then
  bash "$here/gpu_run.sh" "$bundle" tests 240 || status=1
fi
if [[ $what == smollm2 || $what == all ]]; then
  (
    source "$bundle/env.sh"
    for q in "What is the capital of Japan?" "Name three primary colors." "Write a short poem about the sea."; do
      for dev in cpu cuda; do
        timeout 120 "$bundle/bin/pagoda" generate --device "$dev" --prompt "$q" --temperature 0 --max-tokens 48 \
          --logprobs 2 --output-json > "$OUT/smollm2-$dev.json" 2> "$OUT/smollm2-$dev.err" || { tail -3 "$OUT/smollm2-$dev.err"; }
      done
      python3 - "$OUT/smollm2-cpu.json" "$OUT/smollm2-cuda.json" "$q" <<'PY' | tee -a "$OUT/smollm2.txt"
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:3])
# The margin below which a step may flip: twice the worst logprob deviation int8 activations and a bf16 KV
# cache cause on this model (tests/python/test_gguf_model.py measures it: 1.06 nats).
bound = 2.11
agree = 0
for i, (a, b) in enumerate(zip(cpu["token_ids"], gpu["token_ids"])):
    top = cpu["logprobs"][i]
    margin = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf")
    if a != b:
        verdict = "ok (low margin)" if margin < bound else "MISMATCH above the margin"
        print(f"{sys.argv[3]!r}: first difference at step {i} (CPU margin {margin:.2f} nats): {verdict}")
        break
    agree += 1
else:
    print(f"{sys.argv[3]!r}: all {agree} tokens equal")
print(f"  cpu: {cpu['text']!r}\n  gpu: {gpu['text']!r}")
PY
    done
  )
fi
if [[ $what == bench || $what == all ]]; then
  (source "$bundle/env.sh" && timeout 300 "$bundle/bin/quant_gemv_bench") 2>&1 | tee "$OUT/quant_gemv_bench.txt" | tail -40
  for m in dummy:llama3-8b dummy:llama3-8b-q4_k dummy:llama3-8b-q8_0; do
    for b in 1 8 32; do
      echo "== $m batch $b" | tee -a "$OUT/bench.txt"
      (source "$bundle/env.sh" && timeout 300 "$bundle/bin/pagoda" bench latency --model "$m" --input-len 128 \
        --output-len 256 --batch-size "$b" --num-iters 3) 2>&1 | grep -v "^\[\|INFO\|WARNING" | tee -a "$OUT/bench.txt"
    done
  done
fi
if [[ $what == stalls ]]; then
  (
    source "$bundle/env.sh"
    export PAGODA_TEST_DATA=$bundle/data
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/summary.txt"
    timeout 120 ops_cuda_quant_test --gtest_brief=1 >"$OUT/tests.log" 2>&1
    echo "ops_cuda_quant_test rc=$? $(grep -E "^\[  (PASSED|FAILED)  \]" "$OUT/tests.log" | tr '\n' ' ')" |
      tee -a "$OUT/summary.txt"
    timeout 150 quant_gemv_bench >"$OUT/quant_gemv_bench.txt" 2>&1
    echo "quant_gemv_bench rc=$?" | tee -a "$OUT/summary.txt"
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    metrics='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum'
    metrics+=',dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.per_cycle_active'
    metrics+=',sm__warps_active.avg.per_cycle_active,smsp__inst_executed.sum,l1tex__t_sector_hit_rate.pct'
    metrics+=',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'
    for c in "q4_k gate_up 1" "q4_k gate_up 1 --stages 2" "q4_k o 1" "q8_0 gate_up 1" "q4_k gate_up 8"; do
      echo "== $c" >>"$OUT/ncu.txt"
      # shellcheck disable=SC2086
      timeout 60 "$ncu" --clock-control none -k regex:quant_gemv --launch-skip 1 --launch-count 1 \
        --metrics "$metrics" "$bundle/bin/quant_gemv_bench" --profile $c >>"$OUT/ncu.txt" 2>&1
    done
    echo "ncu rc=$?" | tee -a "$OUT/summary.txt"
    for m in dummy:llama3-8b dummy:llama3-8b-q4_k dummy:llama3-8b-q8_0; do
      echo "== $m batch 1" >>"$OUT/bench.txt"
      timeout 100 pagoda bench latency --model "$m" --input-len 128 --output-len 256 --batch-size 1 \
        --num-iters 3 2>&1 | grep -v "^\[\|INFO\|WARNING" >>"$OUT/bench.txt"
    done
    grep -E "^==|decode step" "$OUT/bench.txt" | paste - - | tee -a "$OUT/summary.txt"
    grep -A16 "^m = 1 by kernel" "$OUT/quant_gemv_bench.txt" | tee -a "$OUT/summary.txt"
    grep -A12 "^decode step, GEMV" "$OUT/quant_gemv_bench.txt" | tee -a "$OUT/summary.txt"
  )
fi
if [[ $what == gemv ]]; then
  (
    source "$bundle/env.sh"
    export PAGODA_TEST_DATA=$bundle/data
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/summary.txt"
    for t in ops_cuda_quant_test quant_runner_gpu_test batch_invariance_gpu_test; do
      [[ -x $bundle/bin/$t ]] || continue
      timeout 180 "$bundle/bin/$t" --gtest_brief=1 >"/tmp/$t.log" 2>&1
      echo "$t rc=$? $(grep -E "^\[  (PASSED|FAILED)  \]" "/tmp/$t.log" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
      cat "/tmp/$t.log" >>"$OUT/tests.log"
    done
    timeout 150 quant_gemv_bench >"$OUT/quant_gemv_bench.txt" 2>&1
    echo "quant_gemv_bench rc=$?" | tee -a "$OUT/summary.txt"
    if [[ -x $bundle/bin/quant_gemv_bench-base ]]; then
      timeout 120 quant_gemv_bench-base --iters 20 >"$OUT/quant_gemv_bench-base.txt" 2>&1
      echo "quant_gemv_bench-base rc=$?" | tee -a "$OUT/summary.txt"
    fi
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [[ -n $ncu ]]; then
      metrics='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum'
      metrics+=',dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.per_cycle_active'
      metrics+=',sm__warps_active.avg.per_cycle_active,smsp__inst_executed.sum'
      metrics+=',sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active'
      for c in "q4_k gate_up 1" "q8_0 gate_up 1"; do
        echo "== $c" >>"$OUT/ncu.txt"
        # shellcheck disable=SC2086
        timeout 60 "$ncu" --clock-control none -k regex:quant_gemv --launch-skip 1 --launch-count 1 \
          --metrics "$metrics" "$bundle/bin/quant_gemv_bench" --profile $c >>"$OUT/ncu.txt" 2>&1
      done
      echo "ncu rc=$?" | tee -a "$OUT/summary.txt"
    fi
    for m in dummy:llama3-8b dummy:llama3-8b-q4_k dummy:llama3-8b-q8_0; do
      for b in 1 8 32; do
        echo "== $m batch $b" >>"$OUT/bench.txt"
        timeout 100 pagoda bench latency --model "$m" --input-len 128 --output-len 256 --batch-size "$b" \
          --num-iters 3 2>&1 | grep -v "^\[\|INFO\|WARNING" >>"$OUT/bench.txt"
      done
      if [[ -x $bundle/bin/pagoda-base && $m != dummy:llama3-8b ]]; then  # bf16 does not run the GEMV
        echo "== base $m batch 1" >>"$OUT/bench.txt"
        timeout 100 pagoda-base bench latency --model "$m" --input-len 128 --output-len 256 --batch-size 1 \
          --num-iters 3 2>&1 | grep -v "^\[\|INFO\|WARNING" >>"$OUT/bench.txt"
      fi
    done
    grep -E "^==|decode step" "$OUT/bench.txt" | paste - - | tee -a "$OUT/summary.txt"
    grep -A16 "^m = 1 by kernel" "$OUT/quant_gemv_bench.txt" | tee -a "$OUT/summary.txt"
    grep -A11 "^decode step, GEMV" "$OUT/quant_gemv_bench.txt" | tail -10 | tee -a "$OUT/summary.txt"
    grep -A11 "^decode step, GEMV" "$OUT/quant_gemv_bench-base.txt" 2>/dev/null | tail -10 | tee -a "$OUT/summary.txt"
  )
fi
exit $status
