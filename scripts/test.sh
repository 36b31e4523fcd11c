#!/usr/bin/env bash
# Installs the dependencies, builds pagoda and runs the whole test suite (CTest). GPU tests (label `gpu`)
# print "skipped: no CUDA device" where there is none. Extra arguments go to ctest (e.g. -L gpu, -R select).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja ${PAGODA_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$(cd .. && pwd)/shared}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
