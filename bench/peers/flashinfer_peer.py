"""The FlashInfer library (PyPI `flashinfer-python`) on the shapes of bench/flashinfer_bench.cu, in the same
device call: Llama-3-8B attention (32 query heads, 8 KV heads, head size 128, bf16 queries) over a paged KV
cache. Prints one line per (shape, variant) in flashinfer_bench's format with the prefix `FLASHINFER-LIB`
(a shape the library refuses prints `FAILED: why` and the rest go on) and appends rows to
$OUT/flashinfer_peer.csv (columns impl,kind,batch,ctx,page,layout,kv,variant,ms,tbps,tflops; the header is
written when the file is new, so several invocations of one device call fill one file).

Sections (--only picks one; all four by default):
  decode   batch 1/16/64/128/256 x context 1k/4k/8k/32k, page 16, NHD, KV bf16, fp8 e4m3 and fp8 e5m2
           (--kv picks one). Variants: `cuda-cores` (BatchDecodeWithPagedKVCacheWrapper's default kernel),
           `tensor-cores` (the same wrapper with use_tensor_cores=True: the library's prefill kernels),
           and over e4m3 `fp8-q` (tensor cores with e4m3 queries, quantized before the timed call with
           scale 1: the library takes FP8 queries as input, where pagoda quantizes inside its kernel).
  pages    batch 64 x context 4096, pages 1/8/16/64/128, NHD and HND, KV bf16; cuda-cores and tensor-cores.
  prefill  (batch, length) (1, 8192) / (4, 4096) / (16, 1024), causal, no earlier context, page 16, NHD, bf16:
           BatchPrefillWithPagedKVCacheWrapper with backend `fa3` (what `auto` picks on SM 9.0) and `fa2`.
  cascade  256 requests each decoding one token over a shared prefix of 32768 tokens plus its own suffix of
           1 + (i % 64) tokens (the decoded token is the suffix's last), page 16, NHD, bf16: `off` is plain
           paged decode (both decode variants), `on` is MultiLevelCascadeAttentionWrapper with two levels
           (the prefix once for all 256 queries, then each suffix), merged by the library.

Layout of the cache, as flashinfer_bench builds it: K and V are separate pools of pages, [pages, page, 8, 128]
(NHD) or [pages, 8, page, 128] (HND), filled with random values (standard normal; fp8 caches hold the normal
values rounded to fp8, scale 1). Sequence i's block b is page b * batch + i (attention_bench's scattered
table). Cascade: the prefix is pages 0..2047 of every request, then each request's suffix pages follow in
request order. Queries are standard normal.

Numbers: TB/s counts the K and V bytes of every context key read once, batch x ctx x 8 x 128 x 2 x element
bytes (cascade: both rows count plain decode's bytes, so cascade's gain shows as a higher equivalent).
Prefill TFLOP/s counts 4 x batch x 32 x 128 x len^2 / 2. Time: CUDA events around the library's run() call
alone (plan() is outside, as pagoda's plan is), median of 20 calls; before each timed call a 256 MB zero
fill evicts L2 and keeps the GPU busy while Python enqueues the call (attention_peers.py --cold).

JIT: the library compiles its kernels with nvcc on first use (minutes for its prefill modules). Before any
timing the script compiles every module the sections use in one ninja run (`FLASHINFER-LIB prebuilt ...`;
ninja -j MAX_JOBS, else ninja's default), then runs every variant once on a small shape against a float32
torch reference (`FLASHINFER-LIB check ...: max err E, R of the bound: ok|EXCEEDS`, R the largest ratio of an
output's error to its own bound). An output o = sum_j p_j v_j may differ from the reference by the rounding
of the probabilities to the P.V operand type and of split partials to the output type, u_p sum_j p_j |v_j|
(bf16: u_p = 2^-8, two roundings of 2^-9; the fp8-q variant's e4m3 probabilities: 2^-3, twice e4m3's 2^-4),
plus one bf16 rounding of o (2^-8 |o|, twice bf16's 2^-9). Queries are scaled by 2 for the checks, so that
each output leans on few keys and a wrong page, layout or module shows as an error near |v|, far above the
bound. --checks-only stops there (scripts/device/flashinfer_run.sh's `jit` section: the compiled
modules then travel to later calls as the library's AOT directory).

--quick: one shape of each kind (decode 16 x 4096 for each KV type, pages 8 HND, prefill (16, 1024), cascade).
--cooldown MS: the GPU idles MS milliseconds before each (shape, variant), as attention_bench --cooldown.
Environment: FLASHINFER_WORKSPACE_BASE (the JIT cache goes under it, .cache/flashinfer), MAX_JOBS (nvcc jobs)."""
import argparse
import math
import os
import sys
import time
import warnings

HQ, HK, D = 32, 8, 128
DECODE_BATCHES = (1, 16, 64, 128, 256)
DECODE_CTXS = (1024, 4096, 8192, 32768)
KVS = ("bf16", "e4m3", "e5m2")
PAGE_SIZES = (1, 8, 16, 64, 128)
LAYOUTS = ("NHD", "HND")
PREFILL_SHAPES = ((1, 8192), (4, 4096), (16, 1024))
QUICK_DECODE, QUICK_PAGES, QUICK_PREFILL = (16, 4096), (8, "HND"), (16, 1024)  # --quick: (batch, ctx), (page, layout)
CASCADE_BATCH, CASCADE_PREFIX, PAGE = 256, 32768, 16
DECODE_VARIANTS = ("cuda-cores", "tensor-cores")
PREFILL_VARIANTS = ("fa3", "fa2")
ITERS = 20
DEVICE = "cuda"
WORKSPACE_BYTES = 512 << 20  # the library's float workspace (it recommends at least 128 MB; split-KV partials)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="The FlashInfer library on flashinfer_bench's shapes.")
    ap.add_argument("--only", choices=["decode", "pages", "prefill", "cascade"], help="run one section")
    ap.add_argument("--kv", choices=KVS, help="decode: one KV type")
    ap.add_argument("--quick", action="store_true", help="one shape of each kind")
    ap.add_argument("--cooldown", type=int, default=0, metavar="MS", help="idle MS milliseconds before each shape")
    ap.add_argument("--checks-only", action="store_true", help="compile the modules and run the checks, no timing")
    a = ap.parse_args(argv)
    if not 0 <= a.cooldown <= 600000:
        ap.error("--cooldown takes milliseconds from 0 to 600000")
    if a.kv and a.only not in (None, "decode"):
        ap.error("--kv goes with the decode section")
    return a


# Arguments first, so that --help works where torch is not installed.
ARGS = parse_args(sys.argv[1:])
COOLDOWN_S = ARGS.cooldown / 1000.0

import torch  # noqa: E402

try:
    import flashinfer  # noqa: E402
except Exception as e:  # the wheels were not installed, or a dependency is missing
    print(f"FLASHINFER-LIB unavailable: {type(e).__name__}: {str(e)[:300]}", flush=True)
    sys.exit(1)

DT = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_flush = None  # the 256 MB L2-flush buffer, made on first use
_workspace = None


def workspace():
    global _workspace
    if _workspace is None:
        _workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=DEVICE)
    return _workspace


def median_ms(fn, iters=ITERS):
    global _flush
    if COOLDOWN_S:
        torch.cuda.synchronize()
        time.sleep(COOLDOWN_S)
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _flush.zero_()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def why(e, caught=()):
    lines = str(e).strip().splitlines()
    s = f"{type(e).__name__}: {lines[0][:200] if lines else ''}"
    reasons = [str(w.message).strip().splitlines()[0][:200] for w in caught if str(w.message).strip()]
    return s + (" | " + " | ".join(dict.fromkeys(reasons)) if reasons else "")


# --- the paged cache -------------------------------------------------------------------------------------------


def page_table(lens, page):
    """(indptr, indices, last_page_len) as int32 CPU tensors and the pool's page count: sequence i's block b
    is page b * batch + i."""
    batch = len(lens)
    lens_t = torch.tensor(lens, dtype=torch.int64)
    blocks = (lens_t + page - 1) // page
    nb = int(blocks.max())
    grid = torch.arange(nb)[None, :] * batch + torch.arange(batch)[:, None]
    indices = grid[torch.arange(nb)[None, :] < blocks[:, None]].to(torch.int32)  # row-major: sequence order
    indptr = torch.zeros(batch + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(blocks, 0).to(torch.int32)
    last = (lens_t - (blocks - 1) * page).to(torch.int32)
    return indptr, indices, last, nb * batch


def random_cache(num_pages, page, layout, kv):
    shape = (num_pages, page, HK, D) if layout == "NHD" else (num_pages, HK, page, D)
    k = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16).to(DT[kv])
    v = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16).to(DT[kv])
    return k, v


def gather(cache, layout, indices, length):
    """One sequence's keys (or values) in order as float32 [length, HK, D]."""
    c = cache[indices.long().to(cache.device)]
    if layout == "HND":
        c = c.transpose(1, 2)
    return c.reshape(-1, HK, D)[:length].float()


def reference(q, k, v, causal):
    """float32 attention of q [n, HQ, D] over k, v [L, HK, D] (query head h reads KV head h // (HQ / HK)):
    the output and sum_j p_j |v_j|, the scale of its rounding errors."""
    g = HQ // HK
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k) / math.sqrt(D)
    if causal:  # bottom-right aligned: query i of n sees keys up to i + L - n
        n, L = q.shape[0], k.shape[0]
        mask = torch.arange(L, device=q.device)[None, :] > torch.arange(n, device=q.device)[:, None] + (L - n)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hqk,khd->qhd", p, v), torch.einsum("hqk,khd->qhd", p, v.abs())


# --- the library's calls: each returns run() with plan() done ---------------------------------------------------


def decode_call(variant, layout, kv, page, table, q, k, v, out):
    indptr, indices, last, _ = table
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), layout, use_tensor_cores=variant != "cuda-cores")
    q_type = torch.float8_e4m3fn if variant == "fp8-q" else torch.bfloat16
    w.plan(indptr, indices, last, HQ, HK, D, page, q_data_type=q_type, kv_data_type=DT[kv],
           o_data_type=torch.bfloat16)
    qq = q.to(q_type)  # fp8-q: quantized here, outside the timed call (scale 1: |q| is far below 448)
    return lambda: w.run(qq, (k, v), out=out)


def prefill_call(variant, table, qo_indptr, q, k, v, out):
    indptr, indices, last, _ = table
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace(), "NHD", backend=variant)
    w.plan(qo_indptr, indptr, indices, last, HQ, HK, D, PAGE, causal=True, q_data_type=torch.bfloat16,
           kv_data_type=torch.bfloat16, o_data_type=torch.bfloat16)
    return lambda: w.run(q, (k, v), out=out)


def cascade_tables(batch, prefix):
    """(plain decode's table, the two cascade levels' tables, pool pages, context lengths)."""
    suffix = [1 + i % 64 for i in range(batch)]
    pp = prefix // PAGE  # the prefix fills whole pages 0..pp-1
    s_blocks = [(n + PAGE - 1) // PAGE for n in suffix]
    starts = [pp + sum(s_blocks[:i]) for i in range(batch)]
    rows = [list(range(pp)) + list(range(starts[i], starts[i] + s_blocks[i])) for i in range(batch)]
    s_last = [n - (b - 1) * PAGE for n, b in zip(suffix, s_blocks)]
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    cum = lambda c: i32([0] + [sum(c[:i + 1]) for i in range(len(c))])  # noqa: E731
    plain = (cum([len(r) for r in rows]), i32([p for r in rows for p in r]), i32(s_last))
    level0 = (i32([0, batch]), i32([0, pp]), i32(list(range(pp))), i32([PAGE]))
    level1 = (torch.arange(batch + 1, dtype=torch.int32), cum(s_blocks),
              i32([p for i in range(batch) for p in range(starts[i], starts[i] + s_blocks[i])]), i32(s_last))
    return plain, (level0, level1), pp + sum(s_blocks), [prefix + n for n in suffix]


def cascade_call(levels, q, k, v):
    w = flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace(), "NHD")
    w.plan([lv[0] for lv in levels], [lv[1] for lv in levels], [lv[2] for lv in levels], [lv[3] for lv in levels],
           HQ, HK, D, PAGE, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    return lambda: w.run(q, (k, v))  # its run() takes no out: the returned tensor is allocated per call


# --- JIT and checks -------------------------------------------------------------------------------------------


def modules(variant, kv="bf16"):
    """The library modules (kind, q, kv) a variant's calls load: the decode wrapper's CUDA-core kernel, else
    its prefill kernels (fa2 for bf16 queries: fa3 takes fp8 KV only with fp8 queries), the prefill wrapper's
    named backend, and cascade's fa3 levels (what `auto` picks on SM 9.0) with its merge."""
    return {"cuda-cores": [("decode", "bf16", kv)], "tensor-cores": [("fa2", "bf16", kv)],
            "fp8-q": [("fa3", "e4m3", kv)], "fa3": [("fa3", "bf16", "bf16")], "fa2": [("fa2", "bf16", "bf16")],
            "cascade": [("fa3", "bf16", "bf16"), ("cascade", "", "")]}[variant]


def prebuild(keys):
    """Compiles the modules in one ninja run (parallel across modules), through the library's own JIT specs
    (internal API of this version: where it differs, or a name differs from what a wrapper asks for, the
    wrapper compiles its module itself on first use, one module at a time)."""
    t = time.time()
    try:
        from flashinfer.jit import build_jit_specs
        from flashinfer.jit.attention.modules import gen_batch_decode_module, gen_batch_prefill_module
        from flashinfer.jit.cascade import gen_cascade_module

        specs = []
        for kind, q, kv in keys:
            if kind == "cascade":
                specs.append(gen_cascade_module())
            elif kind == "decode":
                specs.append(gen_batch_decode_module(DT[q], DT[kv], torch.bfloat16, torch.int32, D, D, 0, False, False))
            else:
                specs.append(gen_batch_prefill_module(kind, DT[q], DT[kv], torch.bfloat16, torch.int32, D, D, 0, False,
                                                      False, False))
        build_jit_specs(specs, verbose=False)
        print(f"FLASHINFER-LIB prebuilt {len(specs)} modules in {time.time() - t:.1f} s: "
              f"{', '.join(f'{k}({q},{kv})' if q else k for k, q, kv in keys)}", flush=True)
    except Exception as e:
        print(f"FLASHINFER-LIB prebuild FAILED after {time.time() - t:.1f} s (the checks compile instead): {why(e)}",
              flush=True)


def compare(what, variant, out, refs):
    """(what, max error, largest error / bound) of out against refs' (outputs, sum_j p_j |v_j|)."""
    ref, ref_abs = (torch.cat(x) for x in zip(*refs))
    u_p = 2.0 ** -3 if variant == "fp8-q" else 2.0 ** -8
    err = (out.float() - ref).abs()
    return what, err.max().item(), (err / (u_p * ref_abs + 2.0 ** -8 * ref.abs())).max().item()


def seq_ref(q, k, v, layout, table, i, n, causal):
    indptr, indices = table[0], table[1]
    rows = indices[indptr[i]:indptr[i + 1]]
    return reference(q, gather(k, layout, rows, n), gather(v, layout, rows, n), causal)


def check_decode(variant, layout, kv, page):
    lens = [1000, 1000, 1000, 1000]  # 1000 = 62 pages of 16 + 8: a partly filled last page
    table = page_table(lens, page)
    k, v = random_cache(table[3], page, layout, kv)
    q = 2 * torch.randn(len(lens), HQ, D, device=DEVICE, dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))  # poisoned: an unwritten row shows as NaN
    decode_call(variant, layout, kv, page, table, q, k, v, out)()
    qr = q.to(torch.float8_e4m3fn) if variant == "fp8-q" else q  # the queries the library read
    return compare(f"decode batch={len(lens)} ctx={lens[0]} page={page} layout={layout} kv={kv} variant={variant}",
                   variant, out, [seq_ref(qr[i:i + 1], k, v, layout, table, i, n, False) for i, n in enumerate(lens)])


def check_prefill(variant):
    batch, n = 2, 300
    table = page_table([n] * batch, PAGE)
    k, v = random_cache(table[3], PAGE, "NHD", "bf16")
    q = 2 * torch.randn(batch * n, HQ, D, device=DEVICE, dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    prefill_call(variant, table, torch.arange(batch + 1, dtype=torch.int32) * n, q, k, v, out)()
    return compare(f"prefill batch={batch} len={n} page={PAGE} layout=NHD kv=bf16 variant={variant}", variant, out,
                   [seq_ref(q[i * n:(i + 1) * n], k, v, "NHD", table, i, n, True) for i in range(batch)])


def check_cascade():
    # The two levels' partial outputs are rounded to bf16 before the merge, and P for P.V: 2^-9 each, within
    # u_p = 2^-8 of the bf16 bound.
    batch, prefix = 8, 512
    plain, levels, pages, lens = cascade_tables(batch, prefix)
    k, v = random_cache(pages, PAGE, "NHD", "bf16")
    q = 2 * torch.randn(batch, HQ, D, device=DEVICE, dtype=torch.bfloat16)
    out = cascade_call(levels, q, k, v)()
    return compare(f"cascade on batch={batch} prefix={prefix} page={PAGE} layout=NHD kv=bf16", "cascade", out,
                   [seq_ref(q[i:i + 1], k, v, "NHD", plain, i, n, False) for i, n in enumerate(lens)])


def run_checks(checks):
    t = time.time()
    for c in checks:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                what, e, b = c[0](*c[1:])
            except Exception as ex:  # a refused variant, or a module that does not compile
                print(f"FLASHINFER-LIB check {c[0].__name__[6:]} {' '.join(map(str, c[1:]))}: FAILED: "
                      f"{why(ex, caught)}", flush=True)
                continue
        print(f"FLASHINFER-LIB check {what}: max err {e:.3e}, {b:.3f} of the bound: {'ok' if b <= 1 else 'EXCEEDS'}",
              flush=True)
    print(f"FLASHINFER-LIB checks took {time.time() - t:.1f} s", flush=True)


# --- timed sections -------------------------------------------------------------------------------------------


class Csv:
    def __init__(self, path):
        new = not os.path.exists(path)
        self.f = open(path, "a")
        if new:
            self.f.write("impl,kind,batch,ctx,page,layout,kv,variant,ms,tbps,tflops\n")

    def row(self, kind, batch, ctx, page, layout, kv, variant, ms, tbps="", tflops=""):
        self.f.write(f"FLASHINFER-LIB,{kind},{batch},{ctx},{page},{layout},{kv},{variant},{ms:.4f},{tbps},{tflops}\n")
        self.f.flush()


def timed(make):
    """(ms, the call) or (None, why): make() plans and returns the call; median_ms warms it up and times it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call = make()
            return median_ms(call), call
        except Exception as e:  # a shape the library refuses, or out of memory
            return None, why(e, caught)


def decode_shape(csv, kind, batch, ctx, page, layout, kv, variants):
    what = f"decode batch={batch} ctx={ctx} page={page} layout={layout} kv={kv}"
    try:
        table = page_table([ctx] * batch, page)
        k, v = random_cache(table[3], page, layout, kv)
        q = torch.randn(batch, HQ, D, device=DEVICE, dtype=torch.bfloat16)
        out = torch.empty_like(q)
    except Exception as e:
        print(f"FLASHINFER-LIB {what}: FAILED: {why(e)}", flush=True)
        return
    nbytes = batch * ctx * HK * D * 2 * k.element_size()
    for variant in variants:
        ms, err = timed(lambda: decode_call(variant, layout, kv, page, table, q, k, v, out))
        if ms is None:
            print(f"FLASHINFER-LIB {what} variant={variant}: FAILED: {err}", flush=True)
            continue
        tbps = nbytes / (ms * 1e-3) / 1e12
        print(f"FLASHINFER-LIB {what} variant={variant}: {ms:.3f} ms, {tbps:.2f} TB/s", flush=True)
        csv.row(kind, batch, ctx, page, layout, kv, variant, ms, tbps=f"{tbps:.3f}")
    del k, v, q, out
    torch.cuda.empty_cache()


def decode_variants(kv):
    return DECODE_VARIANTS + (("fp8-q",) if kv == "e4m3" else ())


def decode_section(csv):
    kvs = [ARGS.kv] if ARGS.kv else list(KVS)
    shapes = [QUICK_DECODE] if ARGS.quick else [(b, c) for b in DECODE_BATCHES for c in DECODE_CTXS]
    for kv in kvs:
        for batch, ctx in shapes:
            decode_shape(csv, "decode", batch, ctx, PAGE, "NHD", kv, decode_variants(kv))


def pages_section(csv):
    shapes = [QUICK_PAGES] if ARGS.quick else [(p, lay) for lay in LAYOUTS for p in PAGE_SIZES]
    for page, layout in shapes:
        decode_shape(csv, "pages", 64, 4096, page, layout, "bf16", DECODE_VARIANTS)


def prefill_section(csv):
    for batch, n in [QUICK_PREFILL] if ARGS.quick else PREFILL_SHAPES:
        what = f"prefill batch={batch} len={n} page={PAGE} layout=NHD kv=bf16"
        try:
            table = page_table([n] * batch, PAGE)
            k, v = random_cache(table[3], PAGE, "NHD", "bf16")
            q = torch.randn(batch * n, HQ, D, device=DEVICE, dtype=torch.bfloat16)
            out = torch.empty_like(q)
            qo_indptr = torch.arange(batch + 1, dtype=torch.int32) * n
        except Exception as e:
            print(f"FLASHINFER-LIB {what}: FAILED: {why(e)}", flush=True)
            continue
        flops = 4.0 * batch * HQ * D * n * n / 2
        for variant in PREFILL_VARIANTS:
            ms, err = timed(lambda: prefill_call(variant, table, qo_indptr, q, k, v, out))
            if ms is None:
                print(f"FLASHINFER-LIB {what} variant={variant}: FAILED: {err}", flush=True)
                continue
            tf = flops / (ms * 1e-3) / 1e12
            print(f"FLASHINFER-LIB {what} variant={variant}: {ms:.3f} ms, {tf:.1f} TFLOP/s", flush=True)
            csv.row("prefill", batch, n, PAGE, "NHD", "bf16", variant, ms, tflops=f"{tf:.2f}")
        del k, v, q, out
        torch.cuda.empty_cache()


def cascade_section(csv):
    batch, prefix = CASCADE_BATCH, CASCADE_PREFIX
    what = f"batch={batch} prefix={prefix} page={PAGE} layout=NHD kv=bf16"
    try:
        plain, levels, pages, lens = cascade_tables(batch, prefix)
        k, v = random_cache(pages, PAGE, "NHD", "bf16")
        q = torch.randn(batch, HQ, D, device=DEVICE, dtype=torch.bfloat16)
        outs = {name: torch.empty_like(q) for name in DECODE_VARIANTS}
    except Exception as e:
        print(f"FLASHINFER-LIB cascade {what}: FAILED: {why(e)}", flush=True)
        return
    nbytes = sum(lens) * HK * D * 2 * 2  # plain decode's K and V bytes, counted for both rows
    table = plain + (pages,)
    runs = [(f"off {what} variant={name}", "off-" + name,
             lambda name=name: decode_call(name, "NHD", "bf16", PAGE, table, q, k, v, outs[name]))
            for name in DECODE_VARIANTS]
    runs.append((f"on {what}", "on", lambda: cascade_call(levels, q, k, v)))
    results = {}
    for label, variant, make in runs:
        ms, call = timed(make)
        if ms is None:
            print(f"FLASHINFER-LIB cascade {label}: FAILED: {call}", flush=True)
            continue
        results[variant] = call() if variant == "on" else outs[variant.split("-", 1)[1]]
        tbps = nbytes / (ms * 1e-3) / 1e12
        print(f"FLASHINFER-LIB cascade {label}: {ms:.3f} ms, {tbps:.2f} TB/s-equivalent", flush=True)
        csv.row("cascade", batch, prefix, PAGE, "NHD", "bf16", variant, ms, tbps=f"{tbps:.3f}")
    # The timed outputs of a few requests (suffixes of 1, 2 and 64 tokens) against the reference.
    sample = [0, 1, 63, batch - 1]
    refs = [seq_ref(q[i:i + 1], k, v, "NHD", plain, i, lens[i], False) for i in sample]
    for variant, o in results.items():
        label, e, r = compare(f"cascade {variant} {what} requests={','.join(map(str, sample))}", variant, o[sample],
                              refs)
        print(f"FLASHINFER-LIB check {label}: max err {e:.3e}, {r:.3f} of the bound: {'ok' if r <= 1 else 'EXCEEDS'}",
              flush=True)


def main():
    out_dir = os.environ.get("OUT", ".")
    jit = os.environ.get("FLASHINFER_WORKSPACE_BASE", os.path.expanduser("~"))
    print(f"FLASHINFER-LIB flashinfer {flashinfer.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}, JIT cache under {jit}/.cache/flashinfer, MAX_JOBS "
          f"{os.environ.get('MAX_JOBS', 'unset')}", flush=True)
    sections = [ARGS.only] if ARGS.only else ["decode", "pages", "prefill", "cascade"]
    checks = []
    if "decode" in sections:
        for kv in [ARGS.kv] if ARGS.kv else KVS:
            checks += [(check_decode, variant, "NHD", kv, PAGE) for variant in decode_variants(kv)]
    if "pages" in sections:
        checks += [(check_decode, variant, "HND", "bf16", 8) for variant in DECODE_VARIANTS]
        checks += [(check_decode, "cuda-cores", "NHD", "bf16", 1)]
    if "prefill" in sections:
        checks += [(check_prefill, variant) for variant in PREFILL_VARIANTS]
    if "cascade" in sections:
        checks += [(check_cascade,)]
        checks += [(check_decode, variant, "NHD", "bf16", PAGE) for variant in DECODE_VARIANTS
                   if "decode" not in sections]
    keys = []
    for c in checks:
        variant = "cascade" if c[0] is check_cascade else c[1]
        keys += [m for m in modules(variant, c[3] if c[0] is check_decode else "bf16") if m not in keys]
    prebuild(keys)
    run_checks(checks)
    if ARGS.checks_only:
        return
    csv = Csv(os.path.join(out_dir, "flashinfer_peer.csv"))
    for s in sections:
        {"decode": decode_section, "pages": pages_section, "prefill": prefill_section,
         "cascade": cascade_section}[s](csv)


if __name__ == "__main__":
    main()
