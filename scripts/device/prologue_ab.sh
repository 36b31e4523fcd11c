#!/usr/bin/env bash
# Runs on the GPU machine (tool `device`): the A/B of the decode prologue patches (docs/flash-attn-notes.md,
# plan of the eighth session, item 2). Expects main's bundle unpacked at BUNDLE_DIR with the variants of
# make_variants.sh v-t:t v-p:p v-w:w unpacked into its bin/ (t: decode_trace_slots.patch; p: + the
# block-table prefetch; w: + computed work items).
# Usage there: bash scripts/device/prologue_ab.sh BUNDLE_DIR [PASSES]
# Prints the variants' GPU test summaries, one line per (pass, timing, variant) of decode step times in ms
# over the shapes below, and the traced prologue / loop / tail of each variant at 16 x 4k and 128 x 4k.
set -uo pipefail
bundle=$1
passes=${2:-3}
source "$bundle/env.sh"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$bundle/data}
B=$bundle/bin
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/prologue_ab"
for v in p w; do
  for t in triton_attn_gpu_test flash_attn_gpu_test; do
    timeout 150 "$B/${t}_$v" --gtest_brief=1 >"$OUT/prologue_ab/${t}_$v.log" 2>&1
    echo "== ${t}_$v rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/prologue_ab/${t}_$v.log" | tr '\n' ' ')"
  done
done
shapes=("16 4096" "1 32768" "64 2048" "128 4096" "256 1024")
echo "shapes: ${shapes[*]}"
for pass in $(seq "$passes"); do
  for timing in "" --cold-clean; do
    for v in t p w; do
      line=""
      for s in "${shapes[@]}"; do
        ms=$(timeout 30 "$B/attention_bench_$v" --backend triton --decode $s $timing 2>&1 | grep -oE '[0-9.]+ ms' | head -1)
        line+="${ms% ms} "
      done
      echo "pass $pass ${timing:-hot} $v: $line"
    done
  done
done
for v in t p w; do
  for s in "16 4096" "128 4096"; do
    timeout 30 "$B/attention_bench_$v" --backend triton --decode $s --trace --cold-clean 2>&1 | grep '^trace' | sed "s/^/$v /"
  done
done
