// FLASHINFER's CUDA kernel code run on the host against the float64 CPU reference executing the same plan
// over the same cache bytes and rounded queries (flashinfer_case.h), on machines without a GPU;
// flashinfer_test.cc runs the compiled kernels on the device.
// - The SIMT kernel's per-lane steps (flashinfer_cuda_row.cuh): one warp as 32 lanes in lockstep, the shuffle
//   reduction as its butterfly.
// - The tensor-core CTA body (flashinfer_cuda_mma.cuh): one thread per lane, the warp collectives of
//   ../cuda_emulation.h (mma m16n8k16 and m16n8k32 e4m3, ldmatrix, shuffles, barriers), cp.async as a copy;
//   shared memory poisoned so that a read of what was not written shows.
// Both check the kernels' own indexing (rows, packed GQA heads, NHD/HND pages of any size, run-time split
// ranges, slabs, the merge, the tensor-core fragments and the FP8 query quantization).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "../cuda_emulation.h"
#include "flashinfer_case.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma.cuh"
#include "pagoda/attention/flashinfer/flashinfer_cuda_row.cuh"

namespace pagoda {
namespace {

using namespace fi_detail;
using fi_test::Case;
using fi_test::Inputs;
using fi_test::Layer;
using fi_test::StepSpec;

// The merge kernel's CTAs one after another on one emulated CTA (one thread per lane), shared memory poisoned
// before each.
template <typename T>
void emulate_merge(const FiCudaParams& p) {
  const int heads = fi_merge_heads(p.head_size);
  float smem[kMergeSmemFloats];
  emu::run_cta(kMergeThreads, [&](int tid) {
    for (int i = 0; i < p.plan.num_merged; ++i)
      for (int hb = 0; hb * heads < p.num_q_heads; ++hb) {
        if (tid == 0) std::fill(smem, smem + kMergeSmemFloats, std::nanf(""));
        emu::Ops::sync_cta();
        fi_merge_cta<emu::Ops, T>(p, i, hb, tid, smem);
        emu::Ops::sync_cta();
      }
  });
}

template <typename T, KvKind kKv>
void emulate(const FiCudaParams& p) {
  const int g = p.num_q_heads / p.num_kv_heads;
  for (int i = 0; i < p.plan.num_tasks; ++i) {
    const FiTask task = p.plan.tasks[i];
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh)
      for (int pr = 0; pr < (task.row_end - task.row_begin) * g; ++pr) {  // the warps of the CTA, one after another
        RowState st[32];
        for (int lane = 0; lane < 32; ++lane) row_begin<T>(p, task, kvh, pr, lane, st[lane]);
        for (int k = st[0].kb; k < st[0].ke; ++k) {
          const int64_t row = key_row(p, task, kvh, st[0], k);
          if (row < 0) continue;
          float v[32], w[32];
          for (int lane = 0; lane < 32; ++lane) v[lane] = key_part<T, kKv>(p, st[lane], row, lane);
          for (int o = 16; o > 0; o /= 2) {  // __shfl_xor_sync butterfly
            for (int lane = 0; lane < 32; ++lane) w[lane] = v[lane] + v[lane ^ o];
            std::copy(w, w + 32, v);
          }
          for (int lane = 0; lane < 32; ++lane) key_update<T, kKv>(p, st[lane], v[lane], row, lane);
        }
        for (int lane = 0; lane < 32; ++lane) row_end<T>(p, task, st[lane], lane);
      }
  }
  emulate_merge<T>(p);
}

// The tensor-core body's host Ops: the warp collectives of cuda_emulation.h, cp.async as a copy.
struct HostOps : emu::Ops {
  static void copy16(void* smem, const void* gmem) { std::memcpy(smem, gmem, 16); }
};

template <typename T, KvKind kKv, int HD, bool kQ8, bool kDecode>
void emulate_mma(const FiCudaParams& p) {
  constexpr int kBytes = MmaFmt<T, kKv, HD, kQ8, kDecode>::kSmem;
  std::unique_ptr<uint8_t[]> owner(new uint8_t[kBytes + 16]);
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(owner.get()) + 15) & ~uintptr_t(15));
  for (int i = 0; i < p.plan.num_tasks; ++i)
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      std::memset(smem, 0xff, kBytes);  // stale 0xff: NaN in 16-bit types and e4m3
      emu::run_cta(kMmaThreads, [&](int tid) { fi_mma_cta<HostOps, T, kKv, HD, kQ8, kDecode>(p, i, kvh, tid, smem); });
    }
  emulate_merge<T>(p);
}

// The general or, for a decode plan, the decode kernel, as fi_cuda_run picks them.
template <typename T, KvKind kKv, bool kQ8, bool kDecode>
void emulate_mma_kind(const FiCudaParams& p) {
  switch (p.head_size) {
    case 64: return emulate_mma<T, kKv, 64, kQ8, kDecode>(p);
    case 128: return emulate_mma<T, kKv, 128, kQ8, kDecode>(p);
    case 256: return emulate_mma<T, kKv, 256, kQ8, kDecode>(p);
    default: FAIL() << "head size " << p.head_size;
  }
}
template <typename T, KvKind kKv, bool kQ8>
void emulate_mma_hd(const FiCudaParams& p) {
  if (p.plan.decode) emulate_mma_kind<T, kKv, kQ8, true>(p);
  else emulate_mma_kind<T, kKv, kQ8, false>(p);
}

// What fi_cuda_run launches for the case, with FP8 queries wherever the case asks (the device's SM 8.9+).
template <typename T>
void emulate_case(const Case& c, const FiCudaParams& p) {
  const bool q8 = c.quantize_q && c.kv_dtype == DType::kF8E4M3;
  switch (c.kv_dtype) {
    case DType::kF8E4M3:
      if (!c.mma()) return emulate<T, KvKind::kE4M3>(p);
      return q8 ? emulate_mma_hd<T, KvKind::kE4M3, true>(p) : emulate_mma_hd<T, KvKind::kE4M3, false>(p);
    case DType::kF8E5M2: return c.mma() ? emulate_mma_hd<T, KvKind::kE5M2, false>(p) : emulate<T, KvKind::kE5M2>(p);
    case DType::kF16: case DType::kBF16:
      if (c.kv_dtype != c.dtype) return emulate<T, KvKind::kOther16>(p);
      [[fallthrough]];
    default: return c.mma() ? emulate_mma_hd<T, KvKind::kSame, false>(p) : emulate<T, KvKind::kSame>(p);
  }
}

// want_decode: 1 / 0 checks that the plan is / is not one the decode kernel serves.
void check(const Case& c, uint64_t seed, int want_decode = -1) {
  SCOPED_TRACE(c.str());
  const Inputs in = fi_test::make_inputs(c, seed, c.quantize_q && c.kv_dtype == DType::kF8E4M3);
  if (want_decode >= 0) {
    ASSERT_EQ(fi_decode_plan(in.plan), want_decode == 1) << "the plan's kind";
  }
  std::vector<float> slab_o(size_t(in.plan.max_slabs()) * c.layer.num_q_heads * c.layer.head_size, std::nanf("")),
      slab_lse(size_t(in.plan.max_slabs()) * c.layer.num_q_heads, std::nanf(""));
  std::vector<uint16_t> out(in.qn, 0xffff);  // poisoned: NaN in bf16 and fp16
  FiCudaParams p = fi_test::host_params(c, in);
  p.out = out.data();
  p.plan.tasks = const_cast<FiTask*>(in.plan.tasks());
  p.plan.row_token = const_cast<int32_t*>(in.plan.row_token());
  p.plan.row_seq = const_cast<int32_t*>(in.plan.row_seq());
  p.plan.merge_token = const_cast<int32_t*>(in.plan.merge_token());
  p.plan.merge_indptr = const_cast<int32_t*>(in.plan.merge_indptr());
  p.plan.merge_slab = const_cast<int32_t*>(in.plan.merge_slab());
  p.plan.slab_o = slab_o.data();
  p.plan.slab_lse = slab_lse.data();
  p.plan.num_tasks = in.plan.num_tasks();
  p.plan.num_merged = in.plan.num_merged();
  p.plan.decode = fi_decode_plan(in.plan);
  if (c.dtype == DType::kBF16) emulate_case<__nv_bfloat16>(c, p);
  else emulate_case<__half>(c, p);
  const double err = fi_test::max_error(c, in, out), tol = fi_test::tolerance(c);
  EXPECT_LE(err, tol);
  std::printf("[ flashinfer emulation ] %s%s: max err %.3g (tolerance %.3g)\n", c.str().c_str(),
              c.mma() ? (p.plan.decode ? ", tensor cores (decode kernel)" : ", tensor cores") : ", SIMT", err, tol);
}

// Decodes and prefill chunks of every length class; contexts short enough for one thread per lane.
const StepSpec kSmall{{1, 1, 1, 7, 17}, {1, 17, 150, 7, 60}, {}, {}};
// Longer contexts for the SIMT kernel (its emulation runs lanes in lockstep, without threads).
const StepSpec kMixed{{1, 1, 1, 1, 7, 17, 33}, {1, 17, 513, 4099, 7, 97, 600}, {}, {}};

// kv: the cache's dtype; kU8 (the default) for the query's.
Case make_case(Layer layer, const StepSpec& spec, DType dtype = DType::kBF16, DType kv = DType::kU8) {
  Case c;
  c.layer = layer;
  c.spec = spec;
  c.dtype = dtype;
  c.kv_dtype = kv == DType::kU8 ? dtype : kv;
  c.target = 64;  // splits the longer contexts
  return c;
}

// Head sizes 64/128/256; pages of 1 to 64 in both layouts; GQA 1 to 80: one m-tile shared by four warps (or two
// at head size 256), three m-tiles, and a token of 80 packed rows attended in two passes.
TEST(FlashInferEmulation, TensorCoresHeadSizesPagesLayoutsAndGqa) {
  uint64_t seed = 1;
  for (auto [hd, bs, gqa] : {std::tuple{64, 1, 1}, {64, 16, 8}, {128, 8, 4}, {128, 64, 1}, {256, 16, 4}, {256, 1, 8},
                             {64, 5, 24}, {64, 16, 80}}) {
    const Layer L{2 * gqa, 2, hd, bs, 0, true, seed % 2 ? KvLayout::kHND : KvLayout::kNHD};
    check(make_case(L, kSmall, hd == 128 ? DType::kF16 : DType::kBF16), seed++);
  }
}

// fp8 caches with the query in the model dtype (K widened to it) and, over e4m3, quantized to e4m3 (FP8 MMA).
TEST(FlashInferEmulation, TensorCoresFp8AndFp8Queries) {
  uint64_t seed = 30;
  for (int hd : {64, 128, 256})
    for (auto [kv, q8] : {std::pair{DType::kF8E4M3, false}, {DType::kF8E4M3, true}, {DType::kF8E5M2, false}}) {
      Case c = make_case({8, 2, hd, 16, 0, true, hd == 128 ? KvLayout::kHND : KvLayout::kNHD}, kSmall,
                         hd == 64 ? DType::kF16 : DType::kBF16, kv);
      c.quantize_q = q8;
      check(c, seed++);
    }
}

TEST(FlashInferEmulation, TensorCoresWindowNonCausalCascadeAndCapturedGrid) {
  uint64_t seed = 50;
  for (auto [window, causal] : {std::pair{0, false}, {100, true}, {100, false}})
    check(make_case({8, 2, 64, 16, window, causal, KvLayout::kHND}, kSmall), seed++);
  StepSpec shared;
  shared.group_keys = {256};
  for (int s = 0; s < 12; ++s) {
    shared.q_lens.push_back(s % 7 == 3 ? 5 : 1);
    shared.ctx.push_back(256 + 6 + s * 3);
    shared.group.push_back(0);
  }
  Case c = make_case({8, 2, 64, 16, 0, true, KvLayout::kHND}, shared);
  c.cascade = true;
  check(c, seed++);
  for (int splits : {1, 4}) {
    Case d = make_case({8, 2, 128, 16, 0, true, KvLayout::kNHD}, {{1, 1, 1}, {1, 17, 700}, {}, {}});
    d.graph_splits = splits;
    check(d, seed++);
  }
}

// The decode kernel (every task one m-tile: GQA 1-16, one token a sequence): its three-stage ring over contexts
// of 1 key to many stages, split and unsplit, every head size, page size and cache dtype; and a mixed step's
// plan, which goes to the general kernel.
TEST(FlashInferEmulation, TensorCoresDecodeKernel) {
  uint64_t seed = 90;
  const StepSpec decode{{1, 1, 1, 1, 1}, {1, 17, 64, 190, 1100}, {}, {}};
  for (auto [hd, bs, gqa] : {std::tuple{64, 16, 16}, {128, 1, 4}, {128, 5, 8}, {256, 16, 1}, {256, 128, 8}}) {
    const Layer L{2 * gqa, 2, hd, bs, 0, true, seed % 2 ? KvLayout::kHND : KvLayout::kNHD};
    check(make_case(L, decode, hd == 64 ? DType::kF16 : DType::kBF16), seed++, 1);
  }
  for (auto [kv, q8] : {std::pair{DType::kF8E4M3, false}, {DType::kF8E4M3, true}, {DType::kF8E5M2, false}}) {
    Case c = make_case({8, 2, 128, 16, 0, true, KvLayout::kNHD}, decode, DType::kBF16, kv);
    c.quantize_q = q8;
    check(c, seed++, 1);
  }
  check(make_case({8, 2, 128, 16, 100, true, KvLayout::kHND}, decode), seed++, 1);  // window
  check(make_case({8, 2, 128, 16, 0, true, KvLayout::kNHD}, {{1, 5}, {300, 300}, {}, {}}), seed++, 0);  // 20 rows
  check(make_case({34, 2, 64, 16, 0, true, KvLayout::kNHD}, {{1}, {300}, {}, {}}), seed++, 0);  // GQA 17
}

// The merge kernel alone, against a float64 log-sum-exp combination: slabs whose lse differ by head, by up to
// 40 nats, with empty partials (lse -inf) and a token whose every partial is empty; head sizes 32 to 512 (4
// to 1 heads a CTA, head counts that leave a CTA partly empty); tokens of 1 to 70 slabs (chunks of 32 staged
// in turn). Each output is one rounding of the exact combination away, plus float32 sums.
TEST(FlashInferEmulation, MergeKernel) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto [hq, hd] : {std::pair{6, 32}, {5, 64}, {8, 128}, {3, 256}, {2, 512}}) {
    const std::vector<int> slabs_of = {1, 2, 33, 70, 5, 3};  // token 5: every partial empty
    std::vector<int32_t> indptr = {0}, slab_ids, tokens;
    for (size_t t = 0; t < slabs_of.size(); ++t) {
      tokens.push_back(int32_t(2 * t + 1));  // merged tokens are not the first ones of the step
      indptr.push_back(indptr.back() + slabs_of[t]);
    }
    const int num_slabs = indptr.back();
    for (int i = 0; i < num_slabs; ++i) slab_ids.push_back((i * 37) % num_slabs);  // slabs in any order
    std::vector<float> o(size_t(num_slabs) * hq * hd), lse(size_t(num_slabs) * hq);
    for (float& x : o) x = u(rng);
    for (int sl = 0; sl < num_slabs; ++sl)
      for (int h = 0; h < hq; ++h) {
        const bool empty = rng() % 7 == 0;
        lse[size_t(sl) * hq + h] = empty ? -INFINITY : 10.f * float(h) + 20.f * u(rng);
      }
    for (int e = indptr[5]; e < indptr[6]; ++e)
      for (int h = 0; h < hq; ++h) lse[size_t(slab_ids[size_t(e)]) * hq + h] = -INFINITY;
    const int num_tokens = 2 * int(slabs_of.size()) + 1;
    std::vector<uint16_t> out(size_t(num_tokens) * hq * hd, 0xffff);
    FiCudaParams p;
    p.dtype = DType::kF16;
    p.num_q_heads = hq;
    p.num_kv_heads = 1;
    p.head_size = hd;
    p.out = out.data();
    p.plan.merge_token = tokens.data();
    p.plan.merge_indptr = indptr.data();
    p.plan.merge_slab = slab_ids.data();
    p.plan.slab_o = o.data();
    p.plan.slab_lse = lse.data();
    p.plan.num_merged = int(tokens.size());
    emulate_merge<__half>(p);
    double worst = 0;
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int h = 0; h < hq; ++h) {
        double mx = -INFINITY;
        for (int e = indptr[t]; e < indptr[t + 1]; ++e) mx = std::max(mx, double(lse[size_t(slab_ids[size_t(e)]) * hq + h]));
        for (int d = 0; d < hd; ++d) {
          double num = 0, den = 0;
          for (int e = indptr[t]; mx > -INFINITY && e < indptr[t + 1]; ++e) {
            const int sl = slab_ids[size_t(e)];
            const double w = std::exp(double(lse[size_t(sl) * hq + h]) - mx);
            num += w * o[(size_t(sl) * hq + h) * hd + d];
            den += w;
          }
          const double want = den > 0 ? num / den : 0.0;
          const uint16_t bits = out[(size_t(tokens[t]) * hq + h) * hd + d];
          __half_raw r;
          r.x = bits;
          const double got = double(__half2float(__half(r)));
          // An fp16 ulp at 1 (2^-11: twice the rounding of |want| < 1), float32 weights and sums over <= 70 slabs.
          const double tol = std::ldexp(1.0, -11) + 70 * 4 * std::ldexp(1.0, -24);
          EXPECT_LE(std::fabs(got - want), tol) << "head size " << hd << " token " << t << " head " << h << " dim " << d;
          worst = std::max(worst, std::fabs(got - want) / tol);
        }
      }
    for (int t = 0; t < num_tokens; t += 2)  // tokens not merged keep their poison
      EXPECT_EQ(out[size_t(t) * hq * hd], 0xffff) << "token " << t << " was written";
    std::printf("[ flashinfer emulation ] merge kernel, %d heads x %d: max err / tol %.3f\n", hq, hd, worst);
  }
}

// The SIMT kernel: the head sizes the tensor-core one does not take, and caches of the other 16-bit dtype.
TEST(FlashInferEmulation, SimtHeadSizes) {
  uint64_t seed = 70;
  for (auto [hd, bs, gqa] : {std::tuple{32, 1, 1}, {96, 16, 8}, {512, 128, 2}}) {
    const Layer L{2 * gqa, 2, hd, bs, 0, true, seed % 2 ? KvLayout::kHND : KvLayout::kNHD};
    check(make_case(L, kMixed, hd == 96 ? DType::kF16 : DType::kBF16), seed++);
  }
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2})
    check(make_case({8, 2, 96, 16, 0, true, KvLayout::kNHD}, kMixed, DType::kBF16, kv), seed++);
  Case c = make_case({8, 2, 96, 16, 100, false, KvLayout::kHND}, kMixed);
  check(c, seed++);
  for (auto [q, kv] : {std::pair{DType::kBF16, DType::kF16}, {DType::kF16, DType::kBF16}})
    check(make_case({8, 2, 128, 8, 0, true, KvLayout::kNHD}, kMixed, q, kv), seed++);
  Case d = make_case({8, 2, 96, 16, 0, true, KvLayout::kNHD}, {{1, 1, 1, 1}, {1, 17, 513, 4099}, {}, {}});
  d.graph_splits = 16;
  check(d, seed++);
}

}  // namespace
}  // namespace pagoda
