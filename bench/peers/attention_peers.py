"""Peer attention numbers on the same shapes as bench/attention_bench.cu, in the same device call:
PyTorch scaled_dot_product_attention with the flash and cuDNN backends (contiguous KV, GQA through
enable_gqa=True) for decode and prefill, and compiled FlexAttention for prefill. Prints one line per
(peer, shape) in the style of attention_bench (`PEER decode ...` / `PEER prefill ...`; a peer that refuses a
shape prints `FAILED: why`) and writes $OUT/attention_peers.csv.

--cold: before each timed call a 256 MB zero fill evicts L2 and keeps the GPU busy while Python enqueues the
call, so neither L2 hits from the previous call nor the host's launch latency are timed (attention_bench
--cold times pagoda the same way). --cold-clean: the flush reads the buffer (a sum) instead of zeroing it, so
L2 holds no dirty lines for the timed call to write back (attention_bench --cold-clean).
--graph: decode as a captured engine step runs it (attention_bench --graph): 20 calls back to back in one CUDA
graph, each over its own copy of K and V (copies rotate, together at least 192 MB, so that no call finds its
KV in L2); a call's time is a replay's over 20. Prefill keeps the default timing.
--only decode|prefill: run one half (as attention_bench --only).
--prefill BATCH LEN HEAD [--non-causal] [--no-flex]: one prefill shape (32 query / 8 KV heads, as attention_bench
--prefill), so that a device script can alternate pagoda and the peers shape by shape from the same idle
state; --no-flex leaves out FlexAttention (its compile takes tens of seconds per process).
--cooldown MS: the GPU idles MS milliseconds before each (peer, shape), as attention_bench --cooldown."""
import argparse
import math
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SDPA_PEERS = [("SDPA(flash)", SDPBackend.FLASH_ATTENTION), ("SDPA(cudnn)", SDPBackend.CUDNN_ATTENTION)]
FLEX = "FLEX(compiled)"

DECODE_SHAPES = [(1, 1024), (1, 8192), (1, 32768), (16, 4096), (64, 2048), (128, 4096), (256, 1024), (32, 8192)]

# (batch, n, head_size, kv_heads, causal) with 32 query heads: attention_bench's FLASH_ATTN prefill shapes (its
# contiguous-cache case is what every peer runs anyway).
PREFILL_SHAPES = [
    (4, 8192, 128, 8, True),
    (4, 8192, 128, 8, False),
    (4, 8192, 128, 32, True),  # MHA, the peers' usual comparison
    (4, 8192, 64, 8, True),
    (4, 8192, 64, 8, False),
    (4, 8192, 256, 8, True),
    (4, 8192, 256, 8, False),
    (1, 4096, 128, 8, True),
]
HQ = 32
GRAPH_CALLS = 20  # --graph: decode calls per captured graph
ROTATE_BYTES = 192 << 20  # --graph: the KV copies together hold at least this (~4 x the H200's 50 MB L2)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Peer attention numbers on attention_bench's shapes.")
    timing = ap.add_mutually_exclusive_group()
    timing.add_argument("--cold", action="store_true", help="flush L2 with a 256 MB zero fill before each call")
    timing.add_argument("--cold-clean", action="store_true", help="flush L2 with a 256 MB read before each call")
    timing.add_argument("--graph", action="store_true",
                        help="decode: 20 calls per CUDA graph replay over rotating KV copies")
    ap.add_argument("--only", choices=["decode", "prefill"], help="run one half of the sweep")
    ap.add_argument("--prefill", nargs=3, type=int, metavar=("BATCH", "LEN", "HEAD"),
                    help="one prefill shape (32 query / 8 KV heads)")
    ap.add_argument("--non-causal", action="store_true", help="with --prefill: no causal mask")
    ap.add_argument("--no-flex", action="store_true", help="leave out FlexAttention")
    ap.add_argument("--cooldown", type=int, default=0, metavar="MS", help="idle MS milliseconds before each shape")
    a = ap.parse_args(argv)
    if a.prefill is not None:
        b, n, d = a.prefill
        if b <= 0 or n <= 1 or d <= 0:
            ap.error("--prefill takes BATCH LEN HEAD: positive integers, LEN above 1")
    elif a.non_causal:
        ap.error("--non-causal goes with --prefill")
    if not 0 <= a.cooldown <= 600000:
        ap.error("--cooldown takes milliseconds from 0 to 600000")
    return a


ARGS = parse_args(sys.argv[1:])
CLEAN = ARGS.cold_clean
COLD = CLEAN or ARGS.cold
COOLDOWN_S = ARGS.cooldown / 1000.0
_flush = None  # the L2-flush buffer of --cold, made on first use


def median_ms(fn, iters):
    global _flush
    if COOLDOWN_S:
        torch.cuda.synchronize()
        time.sleep(COOLDOWN_S)
    if COLD and _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if _flush is not None and CLEAN:
            _flush.sum()
        elif _flush is not None:
            _flush.zero_()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def graph_ms(fns, iters=20):
    """--graph: GRAPH_CALLS calls (fns in turn) captured into one CUDA graph; the median replay over the calls."""
    if COOLDOWN_S:
        torch.cuda.synchronize()
        time.sleep(COOLDOWN_S)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, on a side stream as torch.cuda.graph asks
        for i in range(GRAPH_CALLS):
            fns[i % len(fns)]()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(GRAPH_CALLS):
            fns[i % len(fns)]()
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / GRAPH_CALLS)
    times.sort()
    return times[len(times) // 2]


def timed(fn, iters):
    """(ms, None) or (None, why): the exception and the warnings a refusing backend gives its reason in. fn is
    a call, or (--graph) a list of calls over the KV copies."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return (graph_ms(fn) if isinstance(fn, list) else median_ms(fn, iters)), None
        except Exception as e:  # a backend that refuses the shape, or runs out of memory
            lines = str(e).strip().splitlines()
            why = f"{type(e).__name__}: {lines[0][:200] if lines else ''}"
            reasons = [str(w.message).strip().splitlines()[0][:200] for w in caught if str(w.message).strip()]
            if reasons:
                why += " | " + " | ".join(dict.fromkeys(reasons))
            return None, why


def sdpa(backend, q, k, v, causal):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def compiled_flex():
    try:
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        # One compiled graph per (head size, GQA, batch, mask): more than dynamo's default recompile limit.
        for limit in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 64)
        return torch.compile(flex_attention, dynamic=False), create_block_mask
    except Exception as e:
        print(f"{FLEX:14s} unavailable: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None, None


def decode_peers(rows):
    hq, hk, d = HQ, 8, 128
    for batch, ctx in DECODE_SHAPES:
        what = f"decode  kv=bf16 batch={batch:4d} ctx={ctx:6d}"
        kv_bytes = 2 * batch * hk * ctx * d * 2
        copies = min(64, max(2, math.ceil(ROTATE_BYTES / kv_bytes))) if ARGS.graph else 1
        try:
            q = torch.randn(batch, hq, 1, d, device="cuda", dtype=torch.bfloat16)
            kvs = []
            for _ in range(copies):
                k = torch.randn(batch, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
                kvs.append((k, torch.randn_like(k)))
        except Exception as e:
            print(f"{'inputs':14s} {what}  FAILED: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        nbytes = kv_bytes + 2 * q.numel() * 2
        for name, be in SDPA_PEERS:
            calls = [lambda be=be, k=k, v=v: sdpa(be, q, k, v, False) for k, v in kvs]
            ms, why = timed(calls if ARGS.graph else calls[0], 50)
            if ms is None:
                print(f"{name:14s} {what}  FAILED: {why}", flush=True)
                continue
            tbs = nbytes / (ms * 1e-3) / 1e12
            print(f"{name:14s} {what}  {ms:8.3f} ms  {tbs:6.2f} TB/s", flush=True)
            # causal=1 as attention_bench writes it: one query at the end of its context sees every key.
            rows.append(f"{name},decode,bf16,{batch},{ctx},1,{d},{hq},{hk},1,{ms:.4f},{tbs:.3f},")
        del q, kvs, k
        torch.cuda.empty_cache()


def prefill_peers(rows, shapes):
    flex, create_block_mask = (None, None) if ARGS.no_flex else compiled_flex()
    masks = {}
    for batch, n, d, hk, causal in shapes:
        hq = HQ
        mask_name = "causal" if causal else "non-causal"
        what = f"prefill {mask_name:10s} batch={batch} len={n:5d} d={d:3d} hq={hq} hk={hk:2d}"
        try:
            q = torch.randn(batch, hq, n, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, hk, n, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
        except Exception as e:
            print(f"{'inputs':14s} {what}  FAILED: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        pairs = n * (n + 1) / 2 if causal else n * n
        flops = 4.0 * d * hq * batch * pairs
        peers = [(name, lambda be=be: sdpa(be, q, k, v, causal)) for name, be in SDPA_PEERS]
        if flex is not None:
            block_mask = None  # non-causal: every key
            if causal:
                if n not in masks:
                    try:
                        masks[n] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, n, n, device="cuda")
                    except Exception as e:
                        masks[n] = None
                        print(f"{FLEX:14s} causal block mask len={n} FAILED: {type(e).__name__}: {str(e)[:200]}",
                              flush=True)
                block_mask = masks[n]
            if not causal or block_mask is not None:
                peers.append((FLEX, lambda bm=block_mask: flex(q, k, v, block_mask=bm, enable_gqa=True)))
        for name, fn in peers:
            ms, why = timed(fn, 10)
            if ms is None:
                print(f"{name:14s} {what}  FAILED: {why}", flush=True)
                continue
            tf = flops / (ms * 1e-3) / 1e12
            print(f"{name:14s} {what}  {ms:8.3f} ms  {tf:6.1f} TFLOP/s", flush=True)
            rows.append(f"{name},prefill,bf16,{batch},{n},{n},{d},{hq},{hk},{int(causal)},{ms:.4f},,{tf:.2f}")
        del q, k, v, peers
        torch.cuda.empty_cache()


def main():
    out = os.environ.get("OUT", ".")
    print(f"peers: torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    if COLD:
        how = "read" if CLEAN else "zero fill"
        print(f"timing: cold (L2 flushed by a 256 MB {how} and the launch latency hidden before each timed call)",
              flush=True)
    if ARGS.graph:
        print(f"timing: graph (decode: {GRAPH_CALLS} calls per CUDA graph replay over rotating KV copies; "
              "prefill: each call alone)", flush=True)
    rows = []
    if ARGS.prefill is not None:
        b, n, d = ARGS.prefill
        prefill_peers(rows, [(b, n, d, 8, not ARGS.non_causal)])
    else:
        if ARGS.only != "prefill":
            decode_peers(rows)
        if ARGS.only != "decode":
            prefill_peers(rows, PREFILL_SHAPES)
    with open(os.path.join(out, "attention_peers.csv"), "w") as f:
        f.write("backend,kind,kv,batch,ctx,q_len,head_size,q_heads,kv_heads,causal,ms,tbs,tflops\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
