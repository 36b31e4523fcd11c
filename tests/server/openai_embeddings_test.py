"""The official openai client against `pagoda serve all-MiniLM-L6-v2`: /v1/embeddings returns
sentence-transformers' vectors (tests/model/data/minilm_reference.json) for strings, lists and token ids,
float and base64; `dimensions` is refused as vLLM does; 32 concurrent requests share forward steps (the
batch sizes from /metrics are printed and checked).
usage: openai_embeddings_test.py PAGODA_BIN TEST_DATA"""
import base64
import json
import math
import os
import pathlib
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

bin_path = sys.argv[1]
cache = pathlib.Path(os.environ.get("PAGODA_MODEL_CACHE") or
                     pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "pagoda" / "models")
model_dir = cache / "all-MiniLM-L6-v2"
if not (model_dir / "model.safetensors").is_file():
    print(f"skipped: all-MiniLM-L6-v2 is not in {cache} (run `bash scripts/fetch-models.sh`)")
    sys.exit(0)
ref = json.load(open(pathlib.Path(__file__).resolve().parents[1] / "model" / "data" / "minilm_reference.json"))
cases = ref["cases"]


def max_err(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


# float32 through a different summation order than torch: tests/model/minilm_test.cc bounds it by 1e-5.
TOL = 1e-5

log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
server = subprocess.Popen([bin_path, "serve", str(model_dir), "--host", "127.0.0.1", "--port", "0",
                           "--served-model-name", "minilm"], stdout=log, stderr=subprocess.STDOUT)
try:
    port = None
    deadline = time.time() + 60
    while port is None and time.time() < deadline and server.poll() is None:
        m = re.search(r"Starting pagoda API server on http://127\.0\.0\.1:(\d+)", open(log.name).read())
        if m:
            port = int(m.group(1))
        else:
            time.sleep(0.1)
    assert port, "the server did not start:\n" + open(log.name).read()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["minilm"]

    # Texts the server tokenizes (truncation at 256 tokens, the folder's max_seq_length): the cases that fit.
    short = [c for c in cases if len(c["ids"]) <= 256]
    r = client.embeddings.create(model="minilm", input=[c["text"] for c in short], encoding_format="float")
    assert len(r.data) == len(short) and [d.index for d in r.data] == list(range(len(short)))
    worst = max(max_err(d.embedding, c["embedding"]) for d, c in zip(r.data, short))
    assert worst <= TOL, worst
    assert r.usage.prompt_tokens == sum(len(c["ids"]) for c in short) == r.usage.total_tokens, r.usage

    one = client.embeddings.create(model="minilm", input=short[0]["text"])
    assert max_err(one.data[0].embedding, short[0]["embedding"]) <= TOL

    # Token ids, as a list of lists and as one list.
    ids_case = [c for c in cases if 100 < len(c["ids"]) <= 256][0]
    r = client.embeddings.create(model="minilm", input=[ids_case["ids"]])
    assert max_err(r.data[0].embedding, ids_case["embedding"]) <= TOL
    r = client.embeddings.create(model="minilm", input=short[2]["ids"])
    assert max_err(r.data[0].embedding, short[2]["embedding"]) <= TOL

    # base64: little-endian float32, as the openai client decodes by itself when it asks for floats.
    body = json.dumps({"model": "minilm", "input": short[1]["text"], "encoding_format": "base64"}).encode()
    got = json.load(urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/embeddings", body, {"Content-Type": "application/json"})))
    vec = struct.unpack(f"<{384}f", base64.b64decode(got["data"][0]["embedding"]))
    assert max_err(vec, short[1]["embedding"]) <= TOL

    try:
        client.embeddings.create(model="minilm", input="hello", dimensions=128)
        raise AssertionError("dimensions must be refused")
    except openai.BadRequestError as e:
        assert "does not support matryoshka representation" in str(e), e

    # 32 concurrent requests of long texts: they queue while a step runs and share the next ones.
    long_cases = [c for c in cases if 50 < len(c["ids"]) <= 256] * 32
    results, errors = [None] * 32, []
    start = threading.Barrier(32)

    def worker(i):
        try:
            start.wait()
            results[i] = client.embeddings.create(model="minilm", input=long_cases[i]["text"]).data[0].embedding
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    before = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(32):
        assert max_err(results[i], long_cases[i]["embedding"]) <= TOL, i
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    steps = lambda text: int(re.search(r"pagoda_embedding_steps_total\{[^}]*\} (\d+)", text).group(1))
    batches = re.search(r"# recent embedding batch sizes[^:]*: ([\d,]*)", metrics).group(1).split(",")
    new = [int(b) for b in batches[len(batches) - (steps(metrics) - steps(before)):]]
    print(f"32 concurrent requests ran in {len(new)} steps of {new} sequences")
    assert sum(new) == 32 and len(new) < 32 and max(new) > 1, new
    print("openai embeddings test: OK")
finally:
    server.send_signal(signal.SIGTERM)
    try:
        rc = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        rc = server.wait()
    out = open(log.name).read()
    os.unlink(log.name)
if rc != 0:
    print(out)
    sys.exit(f"pagoda serve exited with {rc} after SIGTERM")
