#!/usr/bin/env bash
# Runs on the GPU machine (tool `device`): Nsight Compute on one decode step of pagoda (TRITON_ATTN's decode
# kernels, which FLASH_ATTN runs too) and of PyTorch SDPA with the cuDNN backend on the same shape, with the
# DRAM and L2 counters side by side, at the GPU's own clocks (`--clock-control none`). The question it answers
# (docs/attention-kernels.md, "What limits decode now"): where cuDNN streams faster at a decode shape, is that
# DRAM efficiency (pagoda reads K|V runs of one KV head from paged blocks; cuDNN reads contiguous K and V),
# bytes moved, or the step's fixed cost?
# Usage there: bash scripts/device/profile_decode_dram.sh BUNDLE_DIR ["BATCH CTX" ...]   (default: 128x4k, 16x4k, 1x32k)
#   BENCH_ARGS="--layout hnd" passes extra options to attention_bench (pagoda's side only); CUDNN=0 skips cuDNN.
# Output: one block per (shape, library): each kernel's duration, DRAM bytes read / written, DRAM throughput
# (% of peak), L2 hit rate, SM clock; full CSVs in $OUT/ncu_dram.tgz.
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)  # not "here": the bundle's env.sh sets that
bundle=$1
shift
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=("128 4096" "16 4096" "1 32768")
source "$scripts/ncu_common.sh"
ncu_setup "$bundle"
metrics="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
metrics+=",dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct"
metrics+=",sm__cycles_elapsed.avg.per_second"
for shape in "${shapes[@]}"; do
  read -r batch ctx <<<"$shape"
  name="pagoda_${batch}x${ctx}${BENCH_ARGS:+_${BENCH_ARGS//[^a-z0-9]/}}"
  # Skip the warm-up launches (3 calls, up to 2 kernels each): profile one steady-state step.
  ncu_profile "$name" 120 --clock-control none --launch-skip 6 --launch-count 2 --csv --metrics "$metrics" \
    "$bundle/bin/attention_bench" --backend triton --decode "$batch" "$ctx" ${BENCH_ARGS:-}
  [[ ${CUDNN:-1} == 0 ]] && continue
  name="cudnn_${batch}x${ctx}"
  # Only the kernels inside the NVTX range "sdpa" (two steady-state calls after five warm-up calls).
  ncu_profile "$name" 180 --clock-control none --nvtx --nvtx-include "sdpa/" --launch-count 4 --csv \
    --metrics "$metrics" python3 - "$batch" "$ctx" <<'EOF'
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
batch, ctx = int(sys.argv[1]), int(sys.argv[2])
q = torch.randn(batch, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(batch, 8, ctx, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(5):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("sdpa")
    for _ in range(2):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
EOF
done
tar -C "$reports" -czf "$OUT/ncu_dram.tgz" .
