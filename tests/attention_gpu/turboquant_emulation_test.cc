// The TurboQuant attention kernel's CTA body (attention/turboquant/turboquant_cuda_kernel.cuh) run on the host:
// one thread per lane, the warp collectives of ../cuda_emulation.h (mma.m16n8k16 from the PTX fragment
// layouts, shuffles, barriers for __syncwarp and __syncthreads), cp.async as a copy. It checks the kernel's
// own code (the decoding of every preset into fragments, the Gram-matrix norm correction, the dim
// permutations, the decode and prefill bodies, the warp merge) against the float64 references of
// turboquant_reference.h on machines without a GPU, with the paged planner's work lists and its split merge
// done on the host; turboquant_test.cc runs the compiled kernels on the device.
#include <gtest/gtest.h>

#include <memory>

#include "../cuda_emulation.h"
#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/attention/turboquant/turboquant_cuda_cta.cuh"
#include "pagoda/attention/turboquant/turboquant_cuda_decode.cuh"
#include "turboquant_reference.h"

namespace pagoda {
namespace {

using namespace tq_detail;
using tq_test::TqCase;
using tq_test::TqInputs;

// The host's Ops: the warp collectives of cuda_emulation.h (the kernel's mma takes fp16 operands), cp.async
// as a copy.
struct HostOps : emu::Ops {
  static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu::Ops::mma<__half>(c, a, b0, b1);
  }
  static float rsqrt(float v) { return 1.f / std::sqrt(v); }
  static void copy16(void* smem, const void* gmem) { std::memcpy(smem, gmem, 16); }
};

template <int KB, int VB, bool NC, int D>
void run_cta(const KernelArgs& a, int4 w, int kvh, bool decode8) {
  constexpr int kBytes = std::max(Fmt<KB, VB, NC, D>::kSmem, DecodeFmt<KB, VB, NC, D>::kSmem);
  // Poisoned shared memory: the kernel must not read what it did not write (stale 0xff is NaN in fp16).
  std::unique_ptr<uint8_t[]> owner(new uint8_t[kBytes + 16]);
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(owner.get()) + 15) & ~uintptr_t(15));
  std::memset(smem, 0xff, kBytes);
  static_assert(kThreads == 32 * kWarps);
  emu::run_cta(kThreads, [&](int tid) {
    if (decode8) tq_decode_cta<HostOps, KB, VB, NC, D>(a, w, kvh, tid, smem);
    else tq_cta<HostOps, KB, VB, NC, D>(a, w, kvh, tid, smem);
  });
}

template <int KB, int VB, bool NC>
void run_cta_d(const KernelArgs& a, int4 w, int kvh, bool decode8) {
  switch (a.head_size) {
    case 64: return run_cta<KB, VB, NC, 64>(a, w, kvh, decode8);
    case 128: return run_cta<KB, VB, NC, 128>(a, w, kvh, decode8);
    case 256: return run_cta<KB, VB, NC, 256>(a, w, kvh, decode8);
    default: FAIL() << "head size " << a.head_size;
  }
}

// The paged planner's work list for the case, every (item, KV head) CTA emulated, the split merge on the host.
// The CTA body is the one turboquant_attention dispatches to (the decode body for decode steps of <= 8 rows per
// KV head), or the general one with general_body.
void emulate(const TqCase& c, bool general_body = false) {
  SCOPED_TRACE(tq_test::describe(c) + (general_body ? " general body" : ""));
  const TqInputs in = tq_test::make_inputs(c);
  const TurboQuantPreset& p = tq_test::preset_of(c);
  const int Hq = c.num_q_heads, Hk = c.num_kv_heads, D = c.head_size;
  PagedAttentionOptions opt;
  opt.num_sms = 132;
  opt.fp8_kv = true;
  opt.cluster_merge = false;
  if (c.force_splits > 0) {
    opt.force_splits = true;
    opt.max_splits = c.force_splits;
  }
  const PagedWorkLimits limits{opt.max_splits, std::min(in.T, PagedAttentionWorkspace::kMaxSplitTokens),
                               ((in.T * Hq) / 64 + in.S + 1) * opt.max_splits};
  std::vector<int4> items(size_t(limits.capacity));
  const PagedWorkPlan plan = plan_paged_work(AttentionBatchInfo{c.query_lens, c.seq_lens}, Hq, Hk, opt, limits, items.data());
  const size_t es = dtype_size(c.dtype);
  std::vector<uint8_t> out(size_t(in.T) * Hq * D * es, 0xff);
  std::vector<float> partial_out(size_t(plan.num_splits) * limits.split_tokens * Hq * D, NAN);
  std::vector<float> partial_ml(size_t(plan.num_splits) * limits.split_tokens * Hq * 2, NAN);
  KernelArgs a{};
  a.q = in.q.data();
  a.q_stride = int64_t(in.q_stride);
  a.out = out.data();
  a.cache = in.cache.data();
  a.bf16 = c.dtype == DType::kBF16;
  a.num_q_heads = Hq;
  a.num_kv_heads = Hk;
  a.head_size = D;
  a.block_size = c.block_size;
  a.max_blocks_per_seq = in.max_blocks;
  a.query_start_loc = in.qsl.data();
  a.seq_lens = c.seq_lens.data();
  a.block_tables = in.btab.data();
  a.scale = in.scale;
  a.layer = c.layer;
  for (size_t i = 0; i < in.codebook.size(); ++i) a.centroids[i] = in.codebook[i];
  a.work = items.data();
  a.partial_out = partial_out.data();
  a.partial_ml = partial_ml.data();
  a.partial_tokens = limits.split_tokens;
  a.write_partial = plan.num_splits > 1;
  const int max_q = *std::max_element(c.query_lens.begin(), c.query_lens.end());
  const bool decode8 = !general_body && plan.all_decode && max_q * (Hq / Hk) <= 8;  // turboquant_attention's rule
  for (int i = 0; i < plan.num_items; ++i)
    for (int kvh = 0; kvh < Hk; ++kvh) {
      if (p.key_bits == 8) run_cta_d<8, 4, false>(a, items[size_t(i)], kvh, decode8);
      else if (p.key_bits == 4) run_cta_d<4, 4, true>(a, items[size_t(i)], kvh, decode8);
      else if (p.value_bits == 4) run_cta_d<3, 4, true>(a, items[size_t(i)], kvh, decode8);
      else run_cta_d<3, 3, true>(a, items[size_t(i)], kvh, decode8);
    }
  if (a.write_partial) {  // merge_split_rows' arithmetic
    const size_t split_stride = size_t(limits.split_tokens) * Hq;
    for (int t = 0; t < in.T; ++t)
      for (int h = 0; h < Hq; ++h) {
        const size_t row = size_t(t) * Hq + h;
        float m = -INFINITY;
        for (int s = 0; s < plan.num_splits; ++s) m = std::max(m, partial_ml[(s * split_stride + row) * 2]);
        const float mu = m == -INFINITY ? 0.f : m;
        float l = 0;
        std::vector<float> o(size_t(D), 0.f);
        for (int s = 0; s < plan.num_splits; ++s) {
          const float ms = partial_ml[(s * split_stride + row) * 2];
          if (ms == -INFINITY) continue;
          const float wgt = std::exp2(ms - mu);
          l += partial_ml[(s * split_stride + row) * 2 + 1] * wgt;
          for (int d = 0; d < D; ++d) o[size_t(d)] += partial_out[(s * split_stride + row) * D + d] * wgt;
        }
        for (int d = 0; d < D; ++d) store_from_f32(out.data(), c.dtype, row * D + d, o[size_t(d)] / l);
      }
  }
  tq_test::check_output(c, in, out, decode8 ? "emu-decode" : "emulated");
}

TqCase decode_case(int preset, int D, int hq, int hk, std::vector<int> ctx) {
  TqCase c;
  c.preset = preset;
  c.head_size = D;
  c.num_q_heads = hq;
  c.num_kv_heads = hk;
  c.query_lens.assign(ctx.size(), 1);
  c.seq_lens = std::move(ctx);
  c.seed = unsigned(preset * 1000 + D + hq * 7 + hk);
  return c;
}

// Every preset at every head size: decode (warps split the keys), with GQA 4 (the Gram matrix in rows 8-15 of
// the score mma) and one prefill chunk (each warp its own 16 rows, the Gram matrix in its own mma).
TEST(TurboQuantEmulation, EveryPresetAndHeadSize) {
  for (int preset = 0; preset < 4; ++preset)
    for (int D : {64, 128, 256}) {
      TqCase c = decode_case(preset, D, 8, 2, {1, 70});
      c.query_lens = {1, 19};  // sequence 1: a 19-token prefill chunk over 51 cached tokens (38 rows a head)
      emulate(c);
    }
}

// Decode steps (<= 8 rows per KV head: the decode body, O^T = V^T P^T) at every preset and head size, GQA 1, 3, 4
// and 8, split and unsplit; the same steps through the general body.
TEST(TurboQuantEmulation, DecodeBody) {
  const std::pair<int, int> gqa[] = {{2, 2}, {9, 3}, {8, 2}, {16, 2}};
  int k = 0;
  for (int preset = 0; preset < 4; ++preset)
    for (int D : {64, 128, 256}) {
      const auto [hq, hk] = gqa[size_t(k++ % 4)];
      TqCase c = decode_case(preset, D, hq, hk, {1, 77, 200});
      c.force_splits = k % 3 == 0 ? 2 : 0;
      c.dtype = k % 2 ? DType::kF16 : DType::kBF16;
      emulate(c);
      if (D == 128) emulate(c, /*general_body=*/true);
    }
}

// GQA 1, 4, 8 and 16 (16 rows: the decode body without free Gram rows), block sizes 16, 64, 128; GQA 3 (the
// built-in model's 9/3 heads) and 32 (a decode item of 32 rows: the 64-row body, two warps without rows).
TEST(TurboQuantEmulation, GqaAndBlockSizes) {
  for (auto [hq, hk] : std::vector<std::pair<int, int>>{{9, 3}, {32, 1}}) {
    TqCase c = decode_case(hq == 9 ? 1 : 2, 64, hq, hk, {130, 1});
    c.query_lens = {1, 1};
    emulate(c);
  }
  for (auto [hq, hk] : std::vector<std::pair<int, int>>{{2, 2}, {8, 2}, {8, 1}, {16, 1}})
    for (int bs : {16, 64, 128}) {
      TqCase c = decode_case(1 + (hq + bs) % 3, 128, hq, hk, {7, 97, 1});
      c.block_size = bs;
      c.dtype = bs == 64 ? DType::kF16 : DType::kBF16;
      emulate(c);
    }
}

// Split KV (forced, as a captured decode step has it) and the planner's own splits, merged on the host.
TEST(TurboQuantEmulation, SplitKv) {
  TqCase c = decode_case(2, 64, 8, 2, {300, 1, 129});
  c.force_splits = 3;
  emulate(c);
  TqCase planned = decode_case(3, 128, 4, 1, {513});
  emulate(planned);
}

// A mixed step: decode tokens beside prefill chunks longer than one 64-row item, a strided q.
TEST(TurboQuantEmulation, MixedPrefillAndDecode) {
  TqCase c;
  c.preset = 1;
  c.head_size = 64;
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  c.query_lens = {1, 40, 1, 17};
  c.seq_lens = {33, 40, 100, 17};
  c.q_pad = 2 * 2 * 64;
  c.dtype = DType::kF16;
  emulate(c);
}

}  // namespace
}  // namespace pagoda
