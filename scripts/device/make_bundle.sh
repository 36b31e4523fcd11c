#!/usr/bin/env bash
# Builds the GPU binaries for the H200 (sm_90a only, so the bundle stays small), packs them with the
# Debian libraries the device lacks and the test data the GPU tests read, and compresses everything into
# one file to carry to the device (the carry limit is 64 MiB; xz brings the ~90 MB bundle to ~20 MB).
#
# Usage: bash scripts/device/make_bundle.sh [BUILD_DIR] [OUT_DIR]
#   defaults: /tmp/bdev and .devx (git-ignored: add `.devx/` to .git/info/exclude)
#   BUNDLE_ONLY=REGEX keeps only the binaries whose names match, so that the bundle leaves room in the carry
#   limit for other things (the FlashInfer wheels of scripts/device/flashinfer_run.sh:
#   BUNDLE_ONLY='pagoda|.*flashinfer.*|.*cascade.*_test|cli_generate_gpu_test').
# On the device: tar -xJf .devx/bundle.tar.xz -C /tmp && bash scripts/device/gpu_run.sh /tmp/bundle all
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-/tmp/bdev}
out=${2:-$root/.devx}
data=${PAGODA_TEST_DATA:-$root/../shared}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build"
stage=$(mktemp -d)
bins=("$build/pagoda" "$build/bench/attention_bench" "$build/bench/quant_gemv_bench" "$build/bench/turboquant_bench"
  "$build/bench/flashinfer_bench")
while IFS= read -r t; do bins+=("$t"); done < <(find "$build/tests" -type f -perm -u+x \
  \( -name '*gpu*_test' -o -name 'ops_cuda_*_test' -o -name flashinfer_emulation_test \) | sort)
[[ -n ${BUNDLE_ONLY:-} ]] && mapfile -t bins < <(printf '%s\n' "${bins[@]}" | grep -E "/(${BUNDLE_ONLY})\$")
"$root/../shared/tools/device-bundle" "$stage/bundle" "${bins[@]}" >/dev/null
strip "$stage/bundle/bin/"* 2>/dev/null || true
mkdir -p "$stage/bundle/data/models"
cp -r "$data/reference" "$stage/bundle/data/"
cp -r "$data/models/stories260K" "$stage/bundle/data/models/"
mkdir -p "$out"
tar -C "$stage" -I 'xz -T2 -6' -cf "$out/bundle.tar.xz" bundle
rm -rf "$stage"
ls -la "$out/bundle.tar.xz"
