"""Embeddings/s of all-MiniLM-L6-v2 on the CPU: pagoda's embed_bench beside sentence-transformers (torch) in
the same run, on the same shapes (batch x length, every sequence exactly `length` tokens: [CLS], random
word pieces, [SEP]) and the same thread count, the two alternating shape by shape. Beside wall-clock
embeddings/s it reports embeddings per CPU-second of each process (all its threads, spin-waits included),
which a loaded machine disturbs less. sentence-transformers runs in a scratch venv, never a dependency of
pagoda:
  python3 -m venv /tmp/stvenv && /tmp/stvenv/bin/pip install sentence-transformers
  /tmp/stvenv/bin/python bench/embed_bench.py --bench build-cpu/bench/embed_bench \
      --model ~/.cache/pagoda/models/all-MiniLM-L6-v2 --threads 2 --repeats 3
Prints a table and, with --output-json FILE, writes the rows."""
import argparse
import json
import subprocess
import time

import torch
from sentence_transformers import SentenceTransformer

p = argparse.ArgumentParser()
p.add_argument("--bench", required=True, help="the embed_bench binary")
p.add_argument("--model", required=True)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batches", default="1,32")
p.add_argument("--lengths", default="16,128,512")
p.add_argument("--min-time", type=float, default=2.0)
p.add_argument("--repeats", type=int, default=1, help="rounds per shape; each engine keeps its best")
p.add_argument("--output-json")
a = p.parse_args()
batches = [int(x) for x in a.batches.split(",")]
lengths = [int(x) for x in a.lengths.split(",")]

torch.set_num_threads(a.threads)
model = SentenceTransformer(a.model, device="cpu")
model.max_seq_length = 512
gen = torch.Generator().manual_seed(1)


def st_rate(B, L):
    ids = torch.randint(1000, model.tokenizer.vocab_size, (B, L), generator=gen)
    ids[:, 0], ids[:, -1] = 101, 102
    feats = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    with torch.inference_mode():
        model(dict(feats))  # warm-up
        reps, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            out = model(dict(feats))["sentence_embedding"]
            reps += 1
            if time.perf_counter() - t0 >= a.min_time:
                break
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
    assert out.shape == (B, 384)
    return {"engine": "sentence-transformers", "batch": B, "length": L, "threads": a.threads,
            "embeddings_per_s": B * reps / dt, "ms_per_batch": 1e3 * dt / reps, "embeddings_per_cpu_s": B * reps / dc}


def pagoda_rate(B, L):
    res = subprocess.run([a.bench, "--model", a.model, "--threads", str(a.threads), "--batches", str(B),
                          "--lengths", str(L), "--min-time", str(a.min_time)], capture_output=True, text=True, check=True)
    return next(json.loads(line) for line in res.stdout.splitlines() if line.startswith("{"))


# The engines alternate shape by shape (and round by round), so a change in the machine's load reaches both;
# each keeps its best round.
rows = []
for L in lengths:
    for B in batches:
        best = {}
        for _ in range(a.repeats):
            for r in (st_rate(B, L), pagoda_rate(B, L)):
                if r["engine"] not in best or r["embeddings_per_s"] > best[r["engine"]]["embeddings_per_s"]:
                    best[r["engine"]] = r
        rows += best.values()

import sentence_transformers  # noqa: E402 (for the version line only)

print(f"all-MiniLM-L6-v2, CPU, {a.threads} threads, best of {a.repeats}; sentence-transformers {sentence_transformers.__version__}, "
      f"torch {torch.__version__}")
print(f"{'batch':>5} {'length':>6} {'pagoda emb/s':>13} {'s-t emb/s':>10} {'ratio':>6}   "
      f"{'pagoda emb/cpu-s':>16} {'s-t emb/cpu-s':>14} {'ratio':>6}")
for L in lengths:
    for B in batches:
        pg = next(r for r in rows if r["engine"] == "pagoda" and r["batch"] == B and r["length"] == L)
        st = next(r for r in rows if r["engine"] != "pagoda" and r["batch"] == B and r["length"] == L)
        print(f"{B:>5} {L:>6} {pg['embeddings_per_s']:>13.1f} {st['embeddings_per_s']:>10.1f} "
              f"{pg['embeddings_per_s'] / st['embeddings_per_s']:>6.2f}   {pg['embeddings_per_cpu_s']:>16.1f} "
              f"{st['embeddings_per_cpu_s']:>14.1f} {pg['embeddings_per_cpu_s'] / st['embeddings_per_cpu_s']:>6.2f}")
if a.output_json:
    with open(a.output_json, "w") as f:
        json.dump(rows, f, indent=1)
