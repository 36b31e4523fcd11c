#!/usr/bin/env bash
# Installs the dependencies, builds pagoda once (the C++ tree, its tests and the Python module) and runs the
# whole test suite: CTest, then the Python API's pytest suite (tests/python) against the package installed
# from that same build into a virtual environment (BUILD_DIR/python-venv). GPU tests (label `gpu`) print
# "skipped: no CUDA device" where there is none. Extra arguments go to ctest (e.g. -L gpu, -R select);
# PYTEST_ARGS to pytest; PAGODA_PYTHON_TESTS=0 skips the Python part.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
python_tests=${PAGODA_PYTHON_TESTS:-1}
python_args=()
if [[ $python_tests != 0 ]]; then
  venv=$(mkdir -p "$BUILD_DIR" && cd "$BUILD_DIR" && pwd)/python-venv
  bash scripts/python-env.sh "$venv"
  echo "test.sh: the Python test environment took $SECONDS s"
  python_args=(-DPAGODA_PYTHON=ON "-DPython_EXECUTABLE=$venv/bin/python")
fi
cmake -S . -B "$BUILD_DIR" -G Ninja "${python_args[@]}" ${PAGODA_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "test.sh: environment and build took $SECONDS s"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$(cd .. && pwd)/shared}
status=0
ctest_start=$SECONDS
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@" || status=$?
echo "test.sh: ctest took $((SECONDS - ctest_start)) s"
if [[ $python_tests != 0 ]]; then
  bash scripts/test-python.sh "$BUILD_DIR" ${PYTEST_ARGS:-} || status=$?
fi
exit $status
