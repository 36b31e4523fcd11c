#!/usr/bin/env bash
# pagoda beside llama.cpp on the CPU, same GGUF file, same thread count, one run: prompt processing of 512
# tokens (llama-bench's pp512) and generation of 128 tokens (tg128), in tokens/s, with the weight bandwidth
# each reaches in generation (weight bytes per token x tokens/s).
#
# llama.cpp is not part of pagoda: build its llama-bench in a scratch folder, e.g. from the sdist of
# llama-cpp-python on PyPI (its vendor/llama.cpp):
#   pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lc && cd /tmp/lc && tar xzf *.tar.gz
#   cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
#   cmake --build build -j --target llama-bench
# usage: bench/cpu_vs_llama_cpp.sh PAGODA_BIN LLAMA_BENCH_BIN [GGUF_FILE] [THREADS] [REPS]
#   GGUF_FILE defaults to the built-in model's file; THREADS to nproc; REPS (default 3) timed repetitions.
set -euo pipefail
pagoda=$1
llama_bench=$2
model=${3:-${PAGODA_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
threads=${4:-$(nproc)}
reps=${5:-3}
[[ -f $model ]] || { echo "no model file $model (bash scripts/fetch-models.sh fetches the default)" >&2; exit 2; }
bytes=$(stat -c %s "$model")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== llama.cpp ($llama_bench), $threads threads, $model"
"$llama_bench" -m "$model" -t "$threads" -p 512 -n 128 -r "$reps" -o json > "$tmp/llama.json" 2> "$tmp/llama.err" ||
  { cat "$tmp/llama.err" >&2; exit 1; }
python3 - "$tmp/llama.json" "$bytes" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
for r in rows:
    name = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    extra = f"   ~{float(sys.argv[2]) * r['avg_ts'] / 1e9:.1f} GB/s of file bytes" if r["n_gen"] else ""
    print(f"llama.cpp {name}: {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} tokens/s{extra}")
PY

echo "== pagoda ($pagoda), $threads threads"
common=(--model "$model" --device cpu --cpu-threads "$threads" --batch-size 1 --num-iters "$reps" --num-iters-warmup 1)
"$pagoda" bench latency "${common[@]}" --input-len 512 --output-len 1 --output-json "$tmp/pp.json" > /dev/null 2> "$tmp/pp.err" ||
  { cat "$tmp/pp.err" >&2; exit 1; }
"$pagoda" bench latency "${common[@]}" --input-len 1 --output-len 129 --output-json "$tmp/tg.json" > /dev/null 2> "$tmp/tg.err" ||
  { cat "$tmp/tg.err" >&2; exit 1; }
python3 - "$tmp/pp.json" "$tmp/tg.json" <<'PY'
import json, sys
pp, tg = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"pagoda pp512: {pp['prefill_tokens_per_s']:.1f} tokens/s")
print(f"pagoda tg128: {1e3 / tg['decode_step_ms']:.1f} tokens/s   {tg['weight_bytes'] * 1e3 / tg['decode_step_ms'] / 1e9:.1f} GB/s of weight bytes")
PY
