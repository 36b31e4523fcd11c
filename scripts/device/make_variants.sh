#!/usr/bin/env bash
# Builds the attention GPU tests and attention_bench of other branches (experiments waiting for a device
# run) next to main's bundle, so one device call can A/B them: each binary is renamed NAME_SUFFIX and the
# lot is packed into one .tar.xz that unpacks into the bundle's bin/ (the libraries are main's bundle's).
#
# Usage: bash scripts/device/make_variants.sh OUT.tar.xz BRANCH:SUFFIX [BRANCH:SUFFIX ...]
#   e.g. bash scripts/device/make_variants.sh .devx/variants.tar.xz wip/fa3-staged-kv:stage wip/decode-ilp:ilp
# On the device, after unpacking the main bundle to /tmp/bundle:
#   tar -xJf .devx/variants.tar.xz -C /tmp/bundle && /tmp/bundle/bin/flash_attn_gpu_test_stage ...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
shift
stage=$(mktemp -d)
mkdir -p "$stage/bin"
for spec in "$@"; do
  branch=${spec%%:*}
  suffix=${spec##*:}
  wt=/tmp/variant-wt-$suffix
  build=/tmp/variant-build-$suffix
  git -C "$root" worktree remove --force "$wt" 2>/dev/null || true
  git -C "$root" worktree add --detach "$wt" "$branch" >/dev/null
  cmake -S "$wt" -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target flash_attn_gpu_test triton_attn_gpu_test attention_bench
  cp "$build/tests/attention_gpu/flash_attn_gpu_test" "$stage/bin/flash_attn_gpu_test_$suffix"
  cp "$build/tests/attention_gpu/triton_attn_gpu_test" "$stage/bin/triton_attn_gpu_test_$suffix"
  cp "$build/bench/attention_bench" "$stage/bin/attention_bench_$suffix"
  git -C "$root" worktree remove --force "$wt"
done
strip "$stage/bin/"* 2>/dev/null || true
mkdir -p "$(dirname "$out")"
tar -C "$stage" -I 'xz -T2 -6' -cf "$out" bin
rm -rf "$stage"
ls -la "$out"
