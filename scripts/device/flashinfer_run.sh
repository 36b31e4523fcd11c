#!/usr/bin/env bash
# Runs on the GPU machine: the FLASHINFER run of issue #29 from a bundle of scripts/device/make_bundle.sh, beside
# the FlashInfer library (PyPI flashinfer-python, carried as wheels in .whl/: docs/flashinfer.md says which).
# Sections (each fits one device call of at most 10 minutes; `all` runs tests, cli and bench):
#   jit    installs the wheels and compiles the library's kernels (bench/peers/flashinfer_peer.py --checks-only:
#          every module the peer uses in one ninja run, then its correctness checks) and packs the compiled
#          modules into $OUT/flashinfer-aot.tar.xz. Copied into .whl/ here, it travels with the wheels and later
#          calls install it as the library's AOT directory, so they compile nothing. Needs no bundle (BUNDLE -).
#          If it runs out of time, run it again on the still-warm machine (ninja resumes), or split it with
#          JIT_ARGS="--only decode" and so on.
#   tests  flashinfer_gpu_test, flashinfer_emulation_test, cli_generate_gpu_test --gtest_filter='*FlashInfer*',
#          and any other FLASHINFER or cascade test binary in the bundle (the model-level cascade test)
#   bench  flashinfer_bench and the peer, section by section alternating (decode, pages, prefill, cascade), both
#          with --cooldown $COOLDOWN_MS (default 0) and, with QUICK=1, --quick; both outputs in $OUT/bench.txt,
#          the CSVs in $OUT (flashinfer_peer.csv; flashinfer_bench writes its own)
#   cli    `pagoda generate --device cuda` with --attention-backend FLASHINFER and with --block-size 8 on
#          stories260K (head size 8, which FLASHINFER refuses) and on the reference qwen3-tiny (head size 64;
#          greedy tokens compared with TRITON_ATTN's), with the selection lines of each log
# Logs go to $OUT/flashinfer-SECTION-logs.tgz, a summary to stdout and $OUT/summary.txt.
# Usage there: bash scripts/device/flashinfer_run.sh BUNDLE|- [jit|tests|bench|cli|all] [SECONDS_PER_BINARY]
set -uo pipefail
bundle=$1
what=${2:-all}
limit=${3:-300}
root=$(cd "$(dirname "$0")/../.." && pwd)
peer=$root/bench/peers/flashinfer_peer.py
site=/tmp/site
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
logs=$(mktemp -d)
if [[ $bundle != - ]]; then
  source "$bundle/env.sh"
  export PAGODA_TEST_DATA=${PAGODA_TEST_DATA:-$bundle/data}
  export PAGODA_MODEL_CACHE=${PAGODA_MODEL_CACHE:-$bundle/data/models}
  export PAGODA_BIN=$bundle/bin/pagoda
elif [[ $what != jit ]]; then
  echo "section $what needs the bundle" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/summary.txt"
status=0
summary() { echo "$1" | tee -a "$OUT/summary.txt"; }

# The library: the wheels of .whl/ into $site (a warm machine keeps it between calls), the AOT modules of earlier
# `jit` calls into its AOT directory, and its JIT cache (FLASHINFER_WORKSPACE_BASE) and nvcc's location.
peer_setup() {
  if compgen -G "$root/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$root"/.whl/*.whl >"$logs/pip.log" 2>&1 || { summary "wheels: pip install failed"; tail -3 "$logs/pip.log"; return 1; }
  fi
  [[ -d $site/flashinfer ]] || { summary "flashinfer wheels missing: carry .whl"; return 1; }
  mkdir -p "$site/flashinfer/data/aot"
  for a in "$root"/.whl/flashinfer-aot*.tar.xz; do
    [[ -f $a ]] && tar -xJf "$a" -C "$site/flashinfer/data/aot" && summary "AOT modules from $(basename "$a")"
  done
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  # The library loads an AOT module in place of compiling it, with no fallback: one that does not load here
  # (built against other libraries) is removed, and the library compiles it on first use instead.
  env -u LD_LIBRARY_PATH python3 - "$site/flashinfer/data/aot" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import pathlib, shutil, sys
import torch  # loads the CUDA runtime the modules link
import tvm_ffi
for d in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    try:
        tvm_ffi.load_module(str(d / f"{d.name}.so"))
    except Exception as e:
        print(f"AOT module {d.name} does not load, removed: {type(e).__name__}: {str(e)[:160]}")
        shutil.rmtree(d)
PY
  export FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws TVM_FFI_CACHE_DIR=/tmp/tvm-ffi-cache
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  summary "flashinfer $(ls -d "$site"/flashinfer_python-*.dist-info | sed 's/.*python-//; s/.dist-info//'), nvcc $(nvcc --version | grep -o 'release [0-9.]*'), $(ls "$site/flashinfer/data/aot" | wc -l) AOT modules"
}
# The peer under the machine's own libraries (the bundle's env.sh puts its own first), unbuffered.
run_peer() { env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 timeout "$1" python3 "$peer" "${@:2}"; }

if [[ $what == jit ]]; then
  peer_setup || exit 1
  t0=$SECONDS
  # JIT_ARGS (e.g. "--only decode") splits the compile over calls if one call's 10 minutes do not hold it all.
  # shellcheck disable=SC2086
  run_peer 540 --checks-only ${JIT_ARGS:-} >"$logs/peer-jit.log" 2>&1  # no pipe: a reader that stops early would kill it
  rc=$?
  grep -E "^FLASHINFER-LIB|Error|error:" "$logs/peer-jit.log" | head -60
  summary "flashinfer_peer.py --checks-only rc=$rc in $((SECONDS - t0)) s $(grep -c 'max err' "$logs/peer-jit.log") checks, $(grep -c ' ok$' "$logs/peer-jit.log") ok"
  # Every compiled module as NAME/NAME.so (the AOT directory's layout), with those installed from earlier calls.
  stage=$(mktemp -d)
  for so in /tmp/fi-ws/.cache/flashinfer/*/*/cached_ops/*/*.so "$site"/flashinfer/data/aot/*/*.so; do
    [[ -f $so ]] || continue
    name=$(basename "$so" .so)
    [[ $(basename "$(dirname "$so")") == "$name" ]] && mkdir -p "$stage/$name" && cp -f "$so" "$stage/$name/"
  done
  tar -C "$stage" -cJf "$OUT/flashinfer-aot.tar.xz" .
  summary "flashinfer-aot.tar.xz: $(ls "$stage" | wc -l) modules, $(stat -c %s "$OUT/flashinfer-aot.tar.xz") bytes"
  [[ $rc -eq 0 ]] || status=1
fi

if [[ $what == tests || $what == all ]]; then
  runs=("flashinfer_gpu_test" "flashinfer_emulation_test" "cli_generate_gpu_test:*FlashInfer*")
  for t in "$bundle"/bin/*flashinfer*_test "$bundle"/bin/*cascade*_test; do
    name=$(basename "$t")
    [[ -x $t && " ${runs[*]} " != *" $name "* ]] && runs+=("$name")
  done
  for r in "${runs[@]}"; do
    name=${r%%:*}
    filter=; [[ $r == *:* ]] && filter=${r#*:}
    t=$bundle/bin/$name
    [[ -x $t ]] || { summary "$name MISSING from the bundle"; status=1; continue; }
    timeout "$limit" "$t" --gtest_brief=1 ${filter:+--gtest_filter="$filter"} >"$logs/$name.log" 2>&1
    rc=$?
    line=$(grep -E "^\[  (PASSED|FAILED)  \]" "$logs/$name.log" | tr '\n' ' ')
    [[ $rc -eq 124 ]] && line="TIMED OUT after ${limit}s ($line)"
    [[ -n $filter ]] && line="[$filter] $line"
    summary "$name rc=$rc $line"
    grep -E "Failure|Expected|Which is|skipped" "$logs/$name.log" | head -8
    [[ $rc -eq 0 ]] || status=1
  done
fi

if [[ $what == cli || $what == all ]]; then
  data=$bundle/data
  ref="--prompt-token-ids 11,22,33,44,55,66,77 --temperature 0 --ignore-eos --max-tokens 32 --output-json"
  gen() {  # NAME ARGS...: one generate on the GPU, its exit status and the selection lines of its log
    local name=$1
    shift
    timeout 120 "$bundle/bin/pagoda" generate --device cuda "$@" >"$logs/cli-$name.out" 2>"$logs/cli-$name.err"
    local rc=$?
    summary "generate $name rc=$rc"
    cat "$logs/cli-$name.err" "$logs/cli-$name.out" | grep -iE "attention backend|backend\.|block.size|precluded|KV cache layout|no valid|not supported|warn|error" |
      cut -c1-300 | head -8 | tee -a "$OUT/summary.txt"
  }
  gen stories-flashinfer --model "$data/models/stories260K/hf" --attention-backend FLASHINFER --prompt "Once" --max-tokens 16 --temperature 0
  gen stories-block8 --model "$data/models/stories260K/hf" --block-size 8 --prompt "Once" --max-tokens 16 --temperature 0
  gen qwen3-flashinfer --model "$data/reference/qwen3-tiny" --attention-backend FLASHINFER $ref
  gen qwen3-flashinfer-block8 --model "$data/reference/qwen3-tiny" --attention-backend FLASHINFER --block-size 8 $ref
  gen qwen3-block8 --model "$data/reference/qwen3-tiny" --block-size 8 $ref
  gen qwen3-triton --model "$data/reference/qwen3-tiny" --attention-backend TRITON_ATTN $ref
  for name in qwen3-flashinfer qwen3-flashinfer-block8; do
    python3 - "$logs/cli-$name.out" "$logs/cli-qwen3-triton.out" "$name" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    a, b = (json.load(open(p))["token_ids"] for p in sys.argv[1:3])
except Exception as e:
    print(f"{sys.argv[3]} vs TRITON_ATTN: no result ({type(e).__name__})"); sys.exit(0)
diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"{sys.argv[3]} vs TRITON_ATTN: " + (f"all {len(a)} greedy tokens equal" if diff is None and len(a) == len(b)
      else f"first difference at step {diff} (bf16: a low-margin step may flip)"))
PY
  done
fi

if [[ $what == bench || $what == all ]]; then
  peer_ok=1
  peer_setup || { peer_ok=0; status=1; }
  [[ $peer_ok -eq 1 && ! -d /tmp/fi-ws/.cache/flashinfer && $(ls "$site/flashinfer/data/aot" | wc -l) -eq 0 ]] &&
    summary "warning: no compiled FlashInfer modules (run the jit section first): the peer compiles them now"
  # flashinfer_bench takes the peer's --only, --cooldown and --quick, and --cold to be timed as the peer is
  # (eager calls after a 256 MB memset; without it, the graph timing of an engine step).
  opts=(--cooldown "${COOLDOWN_MS:-0}")
  [[ ${QUICK:-0} == 1 ]] && opts+=(--quick)
  for sec in decode pages prefill cascade; do
    if [[ -x $bundle/bin/flashinfer_bench ]]; then
      OUT=$OUT timeout "$limit" "$bundle/bin/flashinfer_bench" --only "$sec" --cold "${opts[@]}" >"$logs/flashinfer_bench-$sec.log" 2>&1
      rc=$?
      summary "flashinfer_bench --only $sec rc=$rc"
      cat "$logs/flashinfer_bench-$sec.log" >>"$OUT/bench.txt"
      grep -E "FAILED|error" "$logs/flashinfer_bench-$sec.log" | head -5
      [[ $rc -eq 0 ]] || status=1
    else
      summary "flashinfer_bench MISSING from the bundle"
      status=1
    fi
    if [[ $peer_ok -eq 1 ]]; then
      run_peer "$limit" --only "$sec" "${opts[@]}" >"$logs/flashinfer_peer-$sec.log" 2>&1
      rc=$?
      summary "flashinfer_peer.py --only $sec rc=$rc"
      grep -vE "Warning|warn\(" "$logs/flashinfer_peer-$sec.log" >>"$OUT/bench.txt"
      grep -E "check|FAILED|Error|prebuil" "$logs/flashinfer_peer-$sec.log" | head -12
      [[ $rc -eq 0 ]] || status=1
    fi
  done
  # The acceptance rows side by side: batch 1 and 256 at 32k, FP8 at 128 x 4k, the cascade.
  grep -E "batch=(1|256) ctx=32768 page=16 layout=NHD kv=bf16|batch=128 ctx=4096 page=16 layout=NHD kv=e4m3|cascade" \
    "$OUT/bench.txt" | grep -v check
fi
tar -C "$logs" -czf "$OUT/flashinfer-$what-logs.tgz" .  # one archive per section: calls do not overwrite
exit $status
