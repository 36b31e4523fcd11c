"""Peer attention numbers on the same shapes as bench/attention_bench.cu, in the same device call:
PyTorch scaled_dot_product_attention with the flash and cuDNN backends (contiguous KV, GQA through
enable_gqa=True) for decode and prefill, and compiled FlexAttention for prefill. Prints one line per
(peer, shape) in the style of attention_bench (`PEER decode ...` / `PEER prefill ...`; a peer that refuses a
shape prints `FAILED: why`) and writes $OUT/attention_peers.csv.

--cold: before each timed call a 256 MB zero fill evicts L2 and keeps the GPU busy while Python enqueues the
call, so neither L2 hits from the previous call nor the host's launch latency are timed (attention_bench
--cold times pagoda the same way). --cold-clean: the flush reads the buffer (a sum) instead of zeroing it, so
L2 holds no dirty lines for the timed call to write back (attention_bench --cold-clean).
--only decode|prefill: run one half (as attention_bench --only).
--prefill BATCH LEN HEAD [--non-causal] [--no-flex]: one prefill shape (32 query / 8 KV heads, as attention_bench
--prefill), so that a device script can alternate pagoda and the peers shape by shape from the same idle
state; --no-flex leaves out FlexAttention (its compile takes tens of seconds per process).
--cooldown MS: the GPU idles MS milliseconds before each (peer, shape), as attention_bench --cooldown."""
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
CLEAN = "--cold-clean" in sys.argv[1:]
COLD = CLEAN or "--cold" in sys.argv[1:]
ONLY = None  # --only decode|prefill; "" when the value is missing (refused in main)
if "--only" in sys.argv[1:]:
    _i = sys.argv.index("--only")
    ONLY = sys.argv[_i + 1] if _i + 1 < len(sys.argv) else ""
NO_FLEX = "--no-flex" in sys.argv[1:]
ONE_PREFILL = None  # --prefill BATCH LEN HEAD: (batch, len, head, kv heads, causal); "" when malformed
if "--prefill" in sys.argv[1:]:
    _i = sys.argv.index("--prefill")
    try:
        _b, _n, _d = (int(x) for x in sys.argv[_i + 1:_i + 4])
        ONE_PREFILL = (_b, _n, _d, 8, "--non-causal" not in sys.argv[1:]) if _b > 0 and _n > 1 and _d > 0 else ""
    except ValueError:
        ONE_PREFILL = ""
COOLDOWN_S = 0.0  # --cooldown MS; None when malformed (refused in main)
if "--cooldown" in sys.argv[1:]:
    _i = sys.argv.index("--cooldown")
    try:
        _ms = int(sys.argv[_i + 1])
        COOLDOWN_S = _ms / 1000.0 if 0 <= _ms <= 600000 else None
    except (IndexError, ValueError):
        COOLDOWN_S = None
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


def timed(fn, iters):
    """(ms, None) or (None, why): the exception and the warnings a refusing backend gives its reason in."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return median_ms(fn, iters), None
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
        try:
            q = torch.randn(batch, hq, 1, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
        except Exception as e:
            print(f"{'inputs':14s} {what}  FAILED: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        nbytes = 2 * k.numel() * 2 + 2 * q.numel() * 2
        for name, be in SDPA_PEERS:
            ms, why = timed(lambda: sdpa(be, q, k, v, False), 50)
            if ms is None:
                print(f"{name:14s} {what}  FAILED: {why}", flush=True)
                continue
            tbs = nbytes / (ms * 1e-3) / 1e12
            print(f"{name:14s} {what}  {ms:8.3f} ms  {tbs:6.2f} TB/s", flush=True)
            # causal=1 as attention_bench writes it: one query at the end of its context sees every key.
            rows.append(f"{name},decode,bf16,{batch},{ctx},1,{d},{hq},{hk},1,{ms:.4f},{tbs:.3f},")
        del q, k, v
        torch.cuda.empty_cache()


def prefill_peers(rows, shapes):
    flex, create_block_mask = (None, None) if NO_FLEX else compiled_flex()
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
    rows = []
    if ONLY not in (None, "decode", "prefill"):
        sys.exit(f"--only takes decode or prefill, not {ONLY!r}")
    if COOLDOWN_S is None:
        sys.exit("--cooldown takes milliseconds from 0 to 600000")
    if ONE_PREFILL == "":
        sys.exit("--prefill takes BATCH LEN HEAD: positive integers, LEN above 1")
    if ONE_PREFILL is not None:
        prefill_peers(rows, [ONE_PREFILL])
    else:
        if ONLY != "prefill":
            decode_peers(rows)
        if ONLY != "decode":
            prefill_peers(rows, PREFILL_SHAPES)
    with open(os.path.join(out, "attention_peers.csv"), "w") as f:
        f.write("backend,kind,kv,batch,ctx,q_len,head_size,q_heads,kv_heads,causal,ms,tbs,tflops\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
