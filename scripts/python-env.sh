#!/usr/bin/env bash
# Creates, or reuses when up to date, the virtual environment the Python tests run in: `python3 -m venv VENV`
# with python/requirements-test.txt installed from a wheel cache outside the clone
# (PAGODA_WHEEL_CACHE, default ~/.cache/pagoda/wheels). The cache is filled from PyPI only when it lacks a
# wheel, so a machine downloads them once, not on every CI run.
# usage: bash scripts/python-env.sh VENV
set -euo pipefail
venv=$1
root=$(cd "$(dirname "$0")/.." && pwd)
reqs=$root/python/requirements-test.txt
cache=${PAGODA_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda/wheels}
want="$(python3 --version) $(command -v python3)
$(cat "$reqs")"
if [[ -x $venv/bin/python && -f $venv/.pagoda-env && "$(cat "$venv/.pagoda-env")" == "$want" ]]; then
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
if ! "${pip[@]}" install --no-index --find-links "$cache" -r "$reqs" 2>/dev/null; then
  echo "python-env: downloading the test requirements into $cache"
  mkdir -p "$cache"
  "${pip[@]}" download --dest "$cache" -r "$reqs"
  "${pip[@]}" install --no-index --find-links "$cache" -r "$reqs"
fi
printf '%s' "$want" > "$venv/.pagoda-env"
