// TURBOQUANT CPU encode: a step's float32 keys and values into their packed slots (turboquant_cpu.h).
//
// Keys are rotated in float32 (the layer's signs, the chunked Walsh-Hadamard transform) and scaled by
// sqrt(d) / ||k|| in the same multiply; a code is the count of boundaries below the coordinate, as the format
// says. The norm is summed in double. Values are coded in double with the very operations of the float64
// model (core/turboquant.cc), so their codes and every fp16 field match it bit for bit; key codes match it
// except where the float32 rotation lands on the other side of a boundary (the tests bound how close).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "pagoda/attention/turboquant/turboquant_cpu.h"
#include "pagoda/attention/turboquant/turboquant_cpu_scratch.h"
#include "pagoda/attention/turboquant/turboquant_cpu_simd.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using namespace tq_cpu;

// Packs d codes (each < 2^B) as the format's little-endian bit stream into `field` (every byte written).
template <int B>
TQ_INLINE void pack_codes(const int32_t* code, int d, uint8_t* field) {
  const int d8 = d & ~7;
  for (int i = 0; i < d8; i += 8) {
    uint32_t w = 0;
    for (int k = 0; k < 8; ++k) w |= uint32_t(code[i + k]) << (k * B);
    std::memcpy(field + i * B / 8, &w, B);  // B bytes hold 8 codes
  }
  const int bytes = (d * B + 7) / 8;
  std::memset(field + d8 * B / 8, 0, size_t(bytes - d8 * B / 8));
  for (int i = d8; i < d; ++i)
    for (int k = 0; k < B; ++k)
      if ((code[i] >> k) & 1) field[(i * B + k) / 8] |= uint8_t(1u << ((i * B + k) % 8));
}

TQ_INLINE double sum_squares(const float* x, int d) {
  typedef float v4f __attribute__((vector_size(16)));
  v4d acc = {};
  const int d4 = d & ~3;
  for (int i = 0; i < d4; i += 4) {
    v4f f;
    std::memcpy(&f, x + i, sizeof f);
    const v4d y = __builtin_convertvector(f, v4d);
    acc += y * y;
  }
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (int i = d4; i < d; ++i) s += double(x[i]) * x[i];
  return s;
}

template <int KB>
TQ_INLINE void encode_key(const TurboQuantCpuShape& sh, const uint32_t* signs, const float* k, uint8_t* slot,
                          TurboQuantCpuThreadScratch& th) {
  const TurboQuantLayout& L = sh.layout;
  const int d = L.head_size;
  float* r = th.rot.data();
  if constexpr (KB == 8) {
    rotate(k, signs, d, 1.0, r);
    for (int i = 0; i < d; ++i) slot[i] = f32_to_e4m3_sat(r[i]);
  } else {
    const double norm = std::sqrt(sum_squares(k, d));
    // x = k~ sqrt(d) / ||k||; x = 0 for a zero key (0 * the rotation of zeros).
    rotate(k, signs, d, norm > 0 ? std::sqrt(double(d)) / norm : 0.0, r);
    int32_t* code = th.codes.data();
    const int nb = (1 << KB) - 1;
    const float* bounds = sh.boundaries.data();
    const int d8 = d & ~7;
    for (int i = 0; i < d8; i += 8) {
      const v8f x = load8(r + i);
      v8i c = {};
      for (int b = 0; b < nb; ++b) c -= v8i(x > bounds[b]);  // a true comparison is -1
      std::memcpy(code + i, &c, sizeof c);
    }
    for (int i = d8; i < d; ++i) {
      int c = 0;
      for (int b = 0; b < nb; ++b) c += bounds[b] < r[i];
      code[i] = c;
    }
    pack_codes<KB>(code, d, slot);
    const uint16_t nh = turboquant_f16_from_double(norm);
    std::memcpy(slot + L.key_norm_offset, &nh, 2);
  }
}

template <int VB>
TQ_INLINE void encode_value(const TurboQuantLayout& L, const float* v, uint8_t* slot, TurboQuantCpuThreadScratch& th) {
  const int d = L.head_size;
  float lo = v[0], hi = v[0];
  for (int i = 1; i < d; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  const int qmax = (1 << VB) - 1;
  const uint16_t zero_h = turboquant_f16_from_double(lo);
  const double zero = f16_to_f32(zero_h);
  const uint16_t scale_h = turboquant_f16_from_double((double(hi) - zero) / qmax);
  const double scale = f16_to_f32(scale_h);
  int32_t* code = th.codes.data();
  if (scale == 0) {
    std::fill(code, code + d, 0);
  } else {
    // round_half_even((v - zero) / scale) as the model computes it: the quotient clamped to [-1, 2^b] first
    // (a clamp that changes no final code) so that adding and subtracting 1.5 * 2^52 rounds it to nearest even.
    const double magic = 0x1.8p52;
    for (int i = 0; i < d; ++i) {
      const double y = std::clamp((double(v[i]) - zero) / scale, -1.0, double(qmax + 1));
      code[i] = int32_t(std::clamp((y + magic) - magic, 0.0, double(qmax)));
    }
  }
  pack_codes<VB>(code, d, slot + L.value_offset);
  std::memcpy(slot + L.value_scale_offset, &scale_h, 2);
  std::memcpy(slot + L.value_zero_offset, &zero_h, 2);
}

template <int KB, int VB>
TQ_CPU_MULTIVERSION void encode_range(const TurboQuantCpuShape& sh, const TurboQuantCpuWriteKvParams& p,
                                      const uint32_t* signs, int64_t begin, int64_t end, TurboQuantCpuThreadScratch& th) {
  const TurboQuantLayout& L = sh.layout;
  const int d = L.head_size, nkv = sh.num_kv_heads, bs = sh.block_size;
  const int64_t ks = p.key_stride ? p.key_stride : int64_t(nkv) * d;
  const int64_t vs = p.value_stride ? p.value_stride : int64_t(nkv) * d;
  auto* cache = static_cast<uint8_t*>(p.kv_cache);
  for (int64_t it = begin; it < end; ++it) {
    const int64_t t = it / nkv;
    const int h = int(it % nkv);
    const int64_t slot_id = p.slot_mapping[t];
    if (slot_id < 0) continue;
    const int64_t block = slot_id / bs, off = slot_id % bs;
    uint8_t* slot = cache + ((block * nkv + h) * bs + off) * L.slot_bytes;
    encode_key<KB>(sh, signs, p.key + t * ks + int64_t(h) * d, slot, th);
    encode_value<VB>(L, p.value + t * vs + int64_t(h) * d, slot, th);
    if (L.slot_bytes > L.key_bytes + L.value_bytes) slot[L.slot_bytes - 1] = 0;
  }
}

using EncodeFn = void (*)(const TurboQuantCpuShape&, const TurboQuantCpuWriteKvParams&, const uint32_t*, int64_t,
                          int64_t, TurboQuantCpuThreadScratch&);

EncodeFn encode_fn(const TurboQuantLayout& L) {
  if (L.key_bits == 8 && L.value_bits == 4) return encode_range<8, 4>;
  if (L.key_bits == 4 && L.value_bits == 4) return encode_range<4, 4>;
  if (L.key_bits == 3 && L.value_bits == 4) return encode_range<3, 4>;
  if (L.key_bits == 3 && L.value_bits == 3) return encode_range<3, 3>;
  PAGODA_CHECK(false, "turboquant: no CPU encoder for ", L.key_bits, "-bit keys and ", L.value_bits, "-bit values");
  return nullptr;
}

}  // namespace

void turboquant_cpu_write_kv(const TurboQuantCpuShape& sh, const TurboQuantCpuWriteKvParams& p,
                             TurboQuantCpuWorkspace& ws) {
  const int64_t num_slots = p.num_blocks * sh.block_size;
  for (int64_t t = 0; t < p.num_tokens; ++t)
    if (p.slot_mapping[t] >= num_slots)
      throw_runtime_error("turboquant: slot ", p.slot_mapping[t], " of token ", t, " is outside the KV cache (",
                          num_slots, " slots)");
  uint32_t* signs = ws.sign_masks();
  turboquant_cpu_fill_signs(p.layer, sh.layout.head_size, signs);
  const EncodeFn fn = encode_fn(sh.layout);
  const int64_t n = p.num_tokens * sh.num_kv_heads;
  // Chunks of 16 (token, head) pairs from a shared counter: ~5-10 us each, enough to amortise the hand-out.
  constexpr int64_t kChunk = 16;
  struct Ctx {
    const TurboQuantCpuShape* sh;
    const TurboQuantCpuWriteKvParams* p;
    TurboQuantCpuWorkspace* ws;
    const uint32_t* signs;
    EncodeFn fn;
    int64_t n;
    std::atomic<int64_t> next{0};
  } ctx{&sh, &p, &ws, signs, fn, n};
  Ctx* c = &ctx;
  const std::function<void(int64_t, int64_t)> body = [c](int64_t slot, int64_t) {
    TurboQuantCpuThreadScratch& th = c->ws->thread(int(slot));
    for (;;) {
      const int64_t b = c->next.fetch_add(kChunk, std::memory_order_relaxed);
      if (b >= c->n) break;
      c->fn(*c->sh, *c->p, c->signs, b, std::min(c->n, b + kChunk), th);
    }
  };
  if (p.parallel_for && n > 2 * kChunk && ws.num_threads() > 1) p.parallel_for(ws.num_threads(), body);
  else body(0, 1);
}

}  // namespace pagoda
