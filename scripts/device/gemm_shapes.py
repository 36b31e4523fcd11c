# The engine's GEMM shapes (x[M,K] @ W[N,K]^T, bf16, fp32 accumulate) through PyTorch's cuBLAS, to compare
# with the step profile's TFLOP/s: median of 20 event-timed runs after 5 warm-ups, random inputs.
import torch
torch.manual_seed(0)
shapes = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336), "lm_head": (128256, 4096)}
def bench(M, N, K):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for _ in range(5): y = x @ w.t()
    ts = []
    for _ in range(20):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); y = x @ w.t(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); ms = ts[len(ts)//2]
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12, ms
print("8192^3: %.1f TFLOP/s" % bench(8192, 8192, 8192)[0])
for M in (248, 984, 7853, 16016):
    print("M=%5d " % M + "  ".join("%s %.0f" % (k, bench(M, n, kk)[0]) for k, (n, kk) in shapes.items() if k != "lm_head" or M < 2000))
