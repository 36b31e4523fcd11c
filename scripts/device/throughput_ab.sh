#!/usr/bin/env bash
# Runs on the GPU machine (tool `device`): `pagoda bench throughput` on the Llama-3-8B-shaped dummy model,
# 1000 requests of 512 input + 256 output tokens, once per RUN, in the order given (interleave the binaries
# of an A/B). A RUN is "LABEL|BINARY|EXTRA ARGS" (BINARY under BUNDLE/bin). Each run's output goes to
# $OUT/runs.log, a one-line result to stdout; with --step-profile in EXTRA ARGS, name the CSV under $OUT.
# Usage there: bash scripts/device/throughput_ab.sh BUNDLE_DIR RUN... (e.g. after
#   tar -xJf .devx-gpu/bundle.tar.xz -C /tmp)
set -uo pipefail
bundle=$1
shift
source "$bundle/env.sh"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
limit=${RUN_LIMIT_S:-150}
common="--model dummy:llama3-8b --num-prompts 1000 --input-len 512 --output-len 256"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for spec in "$@"; do
  label=${spec%%|*}
  rest=${spec#*|}
  bin=${rest%%|*}
  extra=${rest#*|}
  log=$(mktemp)
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout "$limit" "$bundle/bin/$bin" bench throughput $common $extra >"$log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  { echo "==== $label: $bin bench throughput $common $extra (rc=$rc, ${ms} ms)"; cat "$log"; } >>"$OUT/runs.log"
  line=$(grep -a "^Throughput" "$log")
  printf '%-24s rc=%d wall=%ds %s\n' "$label" "$rc" "$((ms / 1000))" "${line#Throughput: }"
  [[ $rc -eq 0 ]] || tail -c 600 "$log"
  sed -n '/^Step profile/,$p' "$log"
  rm -f "$log"
done
