"""Peer attention numbers on the same shapes as bench/attention_bench.cu, in the same device call:
PyTorch scaled_dot_product_attention with the flash and cuDNN backends (contiguous KV), and compiled
FlexAttention for prefill. Prints one line per shape and writes $OUT/attention_peers.csv."""
import os
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def sdpa(backend, q, k, v, causal):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def main():
    out = os.environ.get("OUT", ".")
    rows = []
    hq, hk, d = 32, 8, 128
    for batch, ctx in [(1, 1024), (1, 8192), (1, 32768), (16, 4096), (64, 2048), (128, 4096), (256, 1024), (32, 8192)]:
        q = torch.randn(batch, hq, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        nbytes = 2 * k.numel() * 2 + 2 * q.numel() * 2
        for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
            try:
                ms = median_ms(lambda: sdpa(be, q, k, v, False), 50)
                tbs = nbytes / (ms * 1e-3) / 1e12
                print(f"peer decode {name:6s} batch={batch:4d} ctx={ctx:6d} {ms:8.3f} ms {tbs:6.2f} TB/s", flush=True)
                rows.append(f"decode,{name},{batch},{ctx},1,{ms:.4f},{tbs:.3f},")
            except Exception as e:  # a backend that refuses the shape
                print(f"peer decode {name} batch={batch} ctx={ctx}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    try:
        from torch.nn.attention.flex_attention import flex_attention, create_block_mask
        flex = torch.compile(flex_attention)
    except Exception as e:
        flex = None
        print("flex unavailable:", e)
    for batch, n in [(4, 8192), (1, 4096)]:
        q = torch.randn(batch, hq, n, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, hk, n, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        flops = 4.0 * d * hq * batch * (n * (n + 1) / 2)
        for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
            try:
                ms = median_ms(lambda: sdpa(be, q, k, v, True), 10)
                tf = flops / (ms * 1e-3) / 1e12
                print(f"peer prefill {name:6s} batch={batch} len={n} {ms:8.3f} ms {tf:6.1f} TFLOP/s", flush=True)
                rows.append(f"prefill,{name},{batch},{n},{n},{ms:.4f},,{tf:.2f}")
            except Exception as e:
                print(f"peer prefill {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        if flex is not None:
            try:
                mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, n, n)
                ms = median_ms(lambda: flex(q, k, v, block_mask=mask, enable_gqa=True), 10)
                tf = flops / (ms * 1e-3) / 1e12
                print(f"peer prefill flex   batch={batch} len={n} {ms:8.3f} ms {tf:6.1f} TFLOP/s", flush=True)
                rows.append(f"prefill,flex,{batch},{n},{n},{ms:.4f},,{tf:.2f}")
            except Exception as e:
                print(f"peer prefill flex: {type(e).__name__}: {str(e)[:160]}", flush=True)
    with open(os.path.join(out, "attention_peers.csv"), "w") as f:
        f.write("kind,peer,batch,ctx,q_len,ms,tbs,tflops\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
