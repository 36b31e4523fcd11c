#!/usr/bin/env bash
# Builds the CPU tree with AddressSanitizer and UndefinedBehaviorSanitizer and runs the CPU tests, the
# hostile-input suite among them (it drives the sanitized `pagoda serve`). Any sanitizer report fails the
# run: UBSan does not recover, ASan aborts on its first error, and LeakSanitizer checks at exit.
# Extra arguments go to ctest (e.g. -R server).
#
# Usage: bash scripts/sanitize.sh [ctest args]   (BUILD_DIR defaults to build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
cmake -S . -B "$BUILD_DIR" -G Ninja -DPAGODA_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$BUILD_DIR" -j "$(nproc)"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$(cd .. && pwd)/shared}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
