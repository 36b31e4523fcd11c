#!/usr/bin/env bash
# Runs on the GPU machine (tool `device`): Nsight Compute on the decode attention kernels of one step per
# shape, bf16 and fp8 KV, so that "what bounds the decode loop" (docs/attention-kernels.md) is answered by
# stall reasons rather than guesses. Full reports go to $OUT/ncu.tgz; stdout gets
# one summary block per (shape, kv): duration, DRAM throughput, issue activity, occupancy and the largest
# warp stall reasons (cycles per issued instruction).
# Usage there: bash scripts/device/profile_decode.sh BUNDLE_DIR ["BATCH CTX" ...]   (default: 16x4k, 1x32k)
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)  # not "here": the bundle's env.sh sets that
bundle=$1
shift
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=("16 4096" "1 32768")
source "$scripts/ncu_common.sh"
ncu_setup "$bundle"
metrics="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
metrics+=",smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active"
for stall in long_scoreboard short_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle \
  not_selected dispatch_stall membar no_instruction; do
  metrics+=",smsp__average_warps_issue_stalled_${stall}_per_issue_active.ratio"
done
for shape in "${shapes[@]}"; do
  for kv in bf16 fp8; do
    name="decode_${shape// /x}_$kv"
    # Skip the warm-up launches of the bench (3 + the first timed ones): profile one steady-state step.
    ncu_profile "$name" 120 --launch-skip 6 --launch-count 2 --csv --metrics "$metrics" \
      "$bundle/bin/attention_bench" --backend triton --decode $shape --kv $kv
  done
done
tar -C "$reports" -czf "$OUT/ncu.tgz" .
