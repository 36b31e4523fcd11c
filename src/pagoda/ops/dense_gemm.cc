// Dense GEMM: packing, the generic tile (CPUs without FMA), the choice of path and the split over threads.
#include "pagoda/ops/dense_gemm.h"

#include <algorithm>
#include <new>

#include "pagoda/core/error.h"
#include "pagoda/ops/dense_gemm_tile.h"

namespace pagoda {
namespace {

using dense::Tile;

// A task is kBlockM rows of x against kBlockPanels panels of W: the rows (<= 384 KiB for k <= 1536) and the
// panel (k x 32 floats) stay in L2 while the block's row tiles pass over the panel, and small products still
// split into enough tasks for the threads.
constexpr int64_t kBlockM = 64;
constexpr int64_t kBlockPanels = 2;

constexpr size_t kAlign = 64;

std::unique_ptr<float[], DenseWeights::AlignedFree> aligned_floats(size_t n) {
  void* p = ::operator new[](std::max<size_t>(n, 1) * sizeof(float), std::align_val_t(kAlign));
  return std::unique_ptr<float[], DenseWeights::AlignedFree>(static_cast<float*>(p));
}

// Without FMA: products and sums rounded separately, in the same k order.
template <int R>
void tile_generic_rows(const Tile& t) {
  alignas(64) float acc[R * kDensePanel];
  for (int i = 0; i < R; ++i) std::copy(t.bias, t.bias + kDensePanel, acc + i * kDensePanel);
  for (int64_t s = 0; s < t.k; ++s) {
    const float* w = t.w + s * kDensePanel;
    for (int i = 0; i < R; ++i) {
      const float xv = t.x[i * t.ldx + s];
      float* a = acc + i * kDensePanel;
      for (int c = 0; c < kDensePanel; ++c) a[c] += xv * w[c];
    }
  }
  dense::finish_tile(t, R, acc);
}

void tile_generic(int rows, const Tile& t) {
  switch (rows) {
    case 1: tile_generic_rows<1>(t); break;
    case 2: tile_generic_rows<2>(t); break;
    case 3: tile_generic_rows<3>(t); break;
    case 4: tile_generic_rows<4>(t); break;
    default: break;
  }
  static_assert(dense::kMaxRowsGeneric == 4);
}

bool cpu_has(DenseIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (isa) {
    case DenseIsa::kGeneric: return true;
    case DenseIsa::kAvx2: return avx2;
    case DenseIsa::kAvx512: return avx2 && __builtin_cpu_supports("avx512f");
  }
  return false;
#else
  return isa == DenseIsa::kGeneric;
#endif
}

}  // namespace

void DenseWeights::AlignedFree::operator()(float* p) const { ::operator delete[](p, std::align_val_t(kAlign)); }

DenseWeights dense_pack(const float* w, const float* bias, int64_t n, int64_t k) {
  PAGODA_CHECK(n >= 1 && k >= 1, "dense_pack: bad shape ", n, " x ", k);
  DenseWeights d;
  d.n = n;
  d.k = k;
  const int64_t np = d.num_panels();
  d.panels = aligned_floats(size_t(np * k * kDensePanel));
  d.bias = aligned_floats(size_t(np * kDensePanel));
  for (int64_t p = 0; p < np; ++p) {
    float* dst = d.panels.get() + p * k * kDensePanel;
    for (int64_t s = 0; s < k; ++s)
      for (int c = 0; c < kDensePanel; ++c) {
        const int64_t j = p * kDensePanel + c;
        dst[s * kDensePanel + c] = j < n ? w[j * k + s] : 0.0f;
      }
  }
  for (int64_t j = 0; j < np * kDensePanel; ++j) d.bias[size_t(j)] = bias && j < n ? bias[j] : 0.0f;
  return d;
}

const char* dense_isa_name(DenseIsa isa) {
  switch (isa) {
    case DenseIsa::kGeneric: return "generic";
    case DenseIsa::kAvx2: return "avx2";
    case DenseIsa::kAvx512: return "avx512";
  }
  return "?";
}

const std::vector<DenseIsa>& dense_isas_available() {
  static const std::vector<DenseIsa> isas = [] {
    std::vector<DenseIsa> v;
    for (DenseIsa i : {DenseIsa::kGeneric, DenseIsa::kAvx2, DenseIsa::kAvx512})
      if (cpu_has(i)) v.push_back(i);
    return v;
  }();
  return isas;
}

void dense_matmul(const DenseMatmulParams& p, ThreadPool* pool) { dense_matmul(p, pool, dense_isas_available().back()); }

void dense_matmul(const DenseMatmulParams& p, ThreadPool* pool, DenseIsa isa) {
  PAGODA_CHECK(p.w != nullptr && p.w->panels, "dense_matmul: no packed weights");
  PAGODA_CHECK(p.m >= 0, "dense_matmul: negative m");
  PAGODA_CHECK(cpu_has(isa), "dense_matmul: this CPU has no ", dense_isa_name(isa));
  if (p.m == 0) return;
  const DenseWeights& w = *p.w;
  const int64_t ldx = p.ldx ? p.ldx : w.k;
  const int64_t ldy = p.ldy ? p.ldy : w.n;
  const int64_t ldr = p.ldr ? p.ldr : w.n;
  void (*tile)(int, const Tile&) = nullptr;
  int max_rows = 0;
  switch (isa) {
    case DenseIsa::kGeneric: tile = tile_generic; max_rows = dense::kMaxRowsGeneric; break;
    case DenseIsa::kAvx2: tile = dense::tile_avx2; max_rows = dense::kMaxRowsAvx2; break;
    case DenseIsa::kAvx512: tile = dense::tile_avx512; max_rows = dense::kMaxRowsAvx512; break;
  }
  const int64_t num_mb = (p.m + kBlockM - 1) / kBlockM;
  const int64_t num_nb = (w.num_panels() + kBlockPanels - 1) / kBlockPanels;
  // Task order: the panel groups of one row block are consecutive, so a thread's run of tasks keeps its rows
  // of x in L2 and streams W (megabytes, shared by all row blocks) rather than the activations (tens of MB).
  parallel_for(pool, num_mb * num_nb, 1, [&](int64_t tb, int64_t te) {
    for (int64_t task = tb; task < te; ++task) {
      const int64_t mb = task / num_nb, nb = task % num_nb;
      const int64_t p0 = nb * kBlockPanels, p1 = std::min(w.num_panels(), p0 + kBlockPanels);
      const int64_t i0 = mb * kBlockM, i1 = std::min(p.m, i0 + kBlockM);
      for (int64_t pi = p0; pi < p1; ++pi) {
        const int64_t j0 = pi * kDensePanel;
        for (int64_t i = i0; i < i1; i += max_rows) {
          const int rows = int(std::min<int64_t>(max_rows, i1 - i));
          const Tile t{.x = p.x + i * ldx,
                       .ldx = ldx,
                       .w = w.panels.get() + pi * w.k * kDensePanel,
                       .bias = w.bias.get() + j0,
                       .k = w.k,
                       .residual = p.residual ? p.residual + i * ldr + j0 : nullptr,
                       .ldr = ldr,
                       .y = p.y + i * ldy + j0,
                       .ldy = ldy,
                       .cols = int(std::min<int64_t>(kDensePanel, w.n - j0)),
                       .gelu = p.epilogue == DenseEpilogue::kGeluErf};
          tile(rows, t);
        }
      }
    }
  });
}

void gelu_erf(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) dense::store16(x + i, dense::gelu16(dense::load16(x + i)));
  if (i < n) {
    float buf[16] = {};
    std::copy(x + i, x + n, buf);
    dense::store16(buf, dense::gelu16(dense::load16(buf)));
    std::copy(buf, buf + (n - i), x + i);
  }
}

void dense_matmul_reference(const DenseMatmulParams& p, double* y) {
  const DenseWeights& w = *p.w;
  const int64_t ldx = p.ldx ? p.ldx : w.k;
  const int64_t ldr = p.ldr ? p.ldr : w.n;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < w.n; ++j) {
      const float* panel = w.panels.get() + (j / kDensePanel) * w.k * kDensePanel + j % kDensePanel;
      double s = w.bias[size_t(j)];
      for (int64_t t = 0; t < w.k; ++t) s += double(p.x[i * ldx + t]) * double(panel[t * kDensePanel]);
      if (p.residual) s += double(p.residual[i * ldr + j]);
      if (p.epilogue == DenseEpilogue::kGeluErf) s = 0.5 * s * (1.0 + std::erf(s * M_SQRT1_2));
      y[i * w.n + j] = s;
    }
}

}  // namespace pagoda
