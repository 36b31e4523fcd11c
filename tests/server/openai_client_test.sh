#!/usr/bin/env bash
# The official `openai` Python client against `pagoda serve`: installs the package from PyPI into a venv
# (VENV, kept between runs) when missing, then runs openai_client_test.py. Fails when PyPI is unreachable.
# usage: openai_client_test.sh VENV PAGODA_BIN TEST_DATA [SCRIPT] (default openai_client_test.py, beside this)
set -euo pipefail
venv=$1 bin=$2 data=${PAGODA_TEST_DATA:-$3} script=${4:-openai_client_test.py}
here=$(cd "$(dirname "$0")" && pwd)
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  echo "installing the openai package into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  if ! timeout 240 "$venv/bin/pip" install --quiet --disable-pip-version-check openai; then
    echo "FAILED: could not install the openai package from PyPI (network?)" >&2
    rm -rf "$venv"
    exit 1
  fi
fi
exec timeout 120 "$venv/bin/python" "$here/$script" "$bin" "$data"
