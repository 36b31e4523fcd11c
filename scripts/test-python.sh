#!/usr/bin/env bash
# The Python API's tests: installs the pagoda package into BUILD_DIR/python-venv from the CMake build in
# BUILD_DIR, then runs tests/python with pytest. The install compiles nothing: scikit-build-core re-runs
# CMake in that build folder, finds every target up to date and packs the module and the `pagoda` command
# into the wheel. Expects a folder that scripts/test.sh configured and built (PAGODA_PYTHON=ON, with that
# venv's Python). Extra arguments go to pytest.
# usage: bash scripts/test-python.sh BUILD_DIR [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "$1" && pwd)
shift
venv=$build/python-venv
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
start=$SECONDS
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-build-isolation --no-cache-dir \
  --force-reinstall -C "build-dir=$build" -C "cmake.build-type=${build_type:-Release}" .
echo "test-python: installed the package from $build in $((SECONDS - start)) s"
export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$(cd .. && pwd)/shared}
exec "$venv/bin/python" -m pytest tests/python -p no:cacheprovider --durations=5 "$@"
