// The plain reference of every block format: decoding into codes, dequantize_row (bit for bit what ggml
// and gguf-py compute: the same float32 operations in the same order, no FMA: pagoda_ops builds with
// -ffp-contract=off) and pagoda's quantizer.
#include "pagoda/ops/quant/quant.h"

#include <algorithm>
#include <cmath>

#include "pagoda/core/error.h"
#include "pagoda/ops/quant/quant_blocks.h"

namespace pagoda {
namespace quant {

void decode_block32(QuantType t, const uint8_t* b, Block32* o) {
  switch (t) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1: {
      const bool has_min = t == QuantType::kQ4_1;
      o->d = load_f16(b);
      o->m = has_min ? load_f16(b + 2) : 0.0f;
      const uint8_t* qs = b + (has_min ? 4 : 2);
      const int off = has_min ? 0 : 8;
      for (int l = 0; l < 16; ++l) {
        o->q[l] = int8_t((qs[l] & 0x0F) - off);
        o->q[l + 16] = int8_t((qs[l] >> 4) - off);
      }
      return;
    }
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const bool has_min = t == QuantType::kQ5_1;
      o->d = load_f16(b);
      o->m = has_min ? load_f16(b + 2) : 0.0f;
      const uint8_t* p = b + (has_min ? 4 : 2);
      const uint32_t qh = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
      const uint8_t* qs = p + 4;
      const int off = has_min ? 0 : 16;
      for (int l = 0; l < 16; ++l) {
        o->q[l] = int8_t(((qs[l] & 0x0F) | (((qh >> l) & 1) << 4)) - off);
        o->q[l + 16] = int8_t(((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4)) - off);
      }
      return;
    }
    case QuantType::kQ8_0:
      o->d = load_f16(b);
      o->m = 0.0f;
      std::memcpy(o->q, b + 2, 32);
      return;
    case QuantType::kNone:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K: break;
  }
  PAGODA_CHECK(false, "decode_block32: ", quant_traits(t).name, " is not a 32-weight block type");
}

namespace {
void decode_k_common(const uint8_t* b, BlockK* o) {
  o->d = load_f16(b);
  o->dmin = load_f16(b + 2);
  for (int j = 0; j < 8; ++j) k_scale_min(b + 4, j, &o->sc[j], &o->mn[j]);
}
}  // namespace

void decode_q4_k(const uint8_t* b, BlockK* o) {
  decode_k_common(b, o);
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      o->q[64 * c + l] = qs[32 * c + l] & 0x0F;
      o->q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
}

void decode_q5_k(const uint8_t* b, BlockK* o) {
  decode_k_common(b, o);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      o->q[64 * c + l] = uint8_t((qs[32 * c + l] & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4));
      o->q[64 * c + 32 + l] = uint8_t((qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
    }
}

void decode_q6_k(const uint8_t* b, BlockQ6K* o) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  std::memcpy(o->sc, b + 192, 16);
  o->d = load_f16(b + 208);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l)
      for (int r = 0; r < 4; ++r) {
        const uint8_t lo = ql[64 * h + l + 32 * (r & 1)];
        const int nib = r < 2 ? (lo & 0x0F) : (lo >> 4);
        const int hi = (qh[32 * h + l] >> (2 * r)) & 3;
        o->q[128 * h + 32 * r + l] = int8_t((nib | (hi << 4)) - 32);
      }
}

}  // namespace quant

using namespace quant;

void dequantize_row(QuantType t, const void* src, float* dst, int64_t n) {
  const QuantTraits tr = quant_traits(t);
  PAGODA_CHECK(t != QuantType::kNone && n % tr.block_elems == 0, "dequantize_row: ", n, " weights of ", tr.name);
  const uint8_t* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / tr.block_elems; ++i, b += tr.block_bytes, dst += tr.block_elems) {
    switch (t) {
      case QuantType::kQ4_0:
      case QuantType::kQ5_0:
      case QuantType::kQ8_0: {
        Block32 k;
        decode_block32(t, b, &k);
        for (int l = 0; l < 32; ++l) dst[l] = k.d * float(k.q[l]);
        break;
      }
      case QuantType::kQ4_1:
      case QuantType::kQ5_1: {
        Block32 k;
        decode_block32(t, b, &k);
        for (int l = 0; l < 32; ++l) dst[l] = k.d * float(k.q[l]) + k.m;
        break;
      }
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: {
        BlockK k;
        if (t == QuantType::kQ4_K) decode_q4_k(b, &k);
        else decode_q5_k(b, &k);
        for (int s = 0; s < 8; ++s) {
          const float d1 = k.d * float(k.sc[s]);
          const float m1 = k.dmin * float(k.mn[s]);
          for (int l = 0; l < 32; ++l) dst[32 * s + l] = d1 * float(k.q[32 * s + l]) - m1;
        }
        break;
      }
      case QuantType::kQ6_K: {
        BlockQ6K k;
        decode_q6_k(b, &k);
        for (int g = 0; g < 16; ++g) {
          const float d1 = k.d * float(k.sc[g]);
          for (int l = 0; l < 16; ++l) dst[16 * g + l] = d1 * float(k.q[16 * g + l]);
        }
        break;
      }
      case QuantType::kNone: break;
    }
  }
}

// ---- quantizer ----
//
// Every scale is rounded to fp16 away from the data (up for a step, down for a min) and the codes are then
// computed against the stored, rounded scales, so every weight lies inside the span the codes can reach:
// the round-trip error is at most half a step (d, or d * sc for the k-quants) plus float rounding. The
// exception is the symmetric Q4_0/Q5_0, whose grid reaches -8/-16 steps on the side of the largest
// magnitude but only 7/15 on the other: there the error is at most one step.
namespace {

uint16_t f16_next_up(uint16_t h) {
  if (h == 0x8000 || h == 0x0000) return 0x0001;
  return (h & 0x8000) ? uint16_t(h - 1) : uint16_t(h + 1);
}
uint16_t f16_next_down(uint16_t h) {
  if (h == 0x8000 || h == 0x0000) return 0x8001;
  return (h & 0x8000) ? uint16_t(h + 1) : uint16_t(h - 1);
}
// The fp16 value nearest to v that is >= v (up) or <= v (down). PRECOND: v finite, |v| < 65504.
uint16_t f16_up(float v) {
  uint16_t h = f32_to_f16(v);
  return f16_to_f32(h) < v ? f16_next_up(h) : h;
}
uint16_t f16_down(float v) {
  uint16_t h = f32_to_f16(v);
  return f16_to_f32(h) > v ? f16_next_down(h) : h;
}
// |result| >= |v|, same sign.
uint16_t f16_away(float v) { return v >= 0 ? f16_up(v) : f16_down(v); }

int round_clamp(float v, int lo, int hi) { return std::clamp(int(std::nearbyint(v)), lo, hi); }

// Codes of a symmetric block (Q4_0 nmax 8, Q5_0 16): d = (largest-magnitude value) / -nmax.
void quantize_sym(const float* x, int nmax, uint8_t* dptr, int* q) {
  float amax = 0, vmax = 0;
  for (int l = 0; l < 32; ++l)
    if (std::fabs(x[l]) > amax) {
      amax = std::fabs(x[l]);
      vmax = x[l];
    }
  const uint16_t dh = f16_away(vmax / float(-nmax));
  store_f16(dptr, dh);
  const float d = f16_to_f32(dh);
  for (int l = 0; l < 32; ++l) q[l] = d != 0 ? round_clamp(x[l] / d, -nmax, nmax - 1) + nmax : nmax;
}

// Codes of a block with a min (Q4_1 qmax 15, Q5_1 31): w = d * q + m.
void quantize_min(const float* x, int qmax, uint8_t* dptr, uint8_t* mptr, int* q) {
  float lo = x[0], hi = x[0];
  for (int l = 1; l < 32; ++l) {
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
  }
  const uint16_t mh = f16_down(lo);
  const float m = f16_to_f32(mh);
  const uint16_t dh = f16_up((hi - m) / float(qmax));
  store_f16(dptr, dh);
  store_f16(mptr, mh);
  const float d = f16_to_f32(dh);
  for (int l = 0; l < 32; ++l) q[l] = d != 0 ? round_clamp((x[l] - m) / d, 0, qmax) : 0;
}

void pack_nibbles16(const int* q, uint8_t* qs) {
  for (int l = 0; l < 16; ++l) qs[l] = uint8_t((q[l] & 0x0F) | ((q[l + 16] & 0x0F) << 4));
}
void pack_high_bits32(const int* q, uint8_t* qh) {
  uint32_t h = 0;
  for (int l = 0; l < 32; ++l) h |= uint32_t((q[l] >> 4) & 1) << l;
  for (int i = 0; i < 4; ++i) qh[i] = uint8_t(h >> (8 * i));
}

// Q4_K (qmax 15) / Q5_K (qmax 31): sub-block s gets min m_s = dmin * mn_s >= -min(x) and step
// d * sc_s >= (max(x) + m_s) / qmax, the 6-bit mn and sc rounded up so the span covers the sub-block.
void quantize_k(const float* x, int qmax, uint8_t* b, int* q) {
  float lo[8], hi[8], need_m[8];
  float max_m = 0;
  for (int s = 0; s < 8; ++s) {
    lo[s] = hi[s] = x[32 * s];
    for (int l = 1; l < 32; ++l) {
      lo[s] = std::min(lo[s], x[32 * s + l]);
      hi[s] = std::max(hi[s], x[32 * s + l]);
    }
    need_m[s] = std::max(0.0f, -lo[s]);
    max_m = std::max(max_m, need_m[s]);
  }
  const uint16_t dminh = f16_up(max_m / 63.0f);
  const float dmin = f16_to_f32(dminh);
  int mn[8], sc[8];
  float m_eff[8], range[8], max_range = 0;
  for (int s = 0; s < 8; ++s) {
    mn[s] = dmin > 0 ? std::clamp(int(std::ceil(need_m[s] / dmin)), 0, 63) : 0;
    m_eff[s] = dmin * float(mn[s]);
    range[s] = std::max(0.0f, hi[s] + m_eff[s]);
    max_range = std::max(max_range, range[s]);
  }
  const uint16_t dh = f16_up(max_range / float(qmax * 63));
  const float d = f16_to_f32(dh);
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? std::clamp(int(std::ceil(range[s] / (float(qmax) * d))), 0, 63) : 0;
    const float step = d * float(sc[s]);
    for (int l = 0; l < 32; ++l)
      q[32 * s + l] = step > 0 ? round_clamp((x[32 * s + l] + m_eff[s]) / step, 0, qmax) : 0;
  }
  store_f16(b, dh);
  store_f16(b + 2, dminh);
  uint8_t* sp = b + 4;
  for (int j = 0; j < 4; ++j) {
    sp[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    sp[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
    sp[j + 8] = uint8_t((sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4));
  }
}

void quantize_q6_k(const float* x, uint8_t* b) {
  float need[16], max_need = 0;
  for (int g = 0; g < 16; ++g) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * g + l]));
    need[g] = amax / 31.0f;
    max_need = std::max(max_need, need[g]);
  }
  const uint16_t dh = f16_up(max_need / 127.0f);
  const float d = f16_to_f32(dh);
  int u[256];
  int8_t* scales = reinterpret_cast<int8_t*>(b + 192);
  for (int g = 0; g < 16; ++g) {
    const int sc = d > 0 ? std::clamp(int(std::ceil(need[g] / d)), 0, 127) : 0;
    scales[g] = int8_t(sc);
    const float step = d * float(sc);
    for (int l = 0; l < 16; ++l) u[16 * g + l] = (step > 0 ? round_clamp(x[16 * g + l] / step, -32, 31) : 0) + 32;
  }
  store_f16(b + 208, dh);
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int* v = u + 128 * h + l;
      ql[64 * h + l] = uint8_t((v[0] & 0x0F) | ((v[64] & 0x0F) << 4));
      ql[64 * h + l + 32] = uint8_t((v[32] & 0x0F) | ((v[96] & 0x0F) << 4));
      qh[32 * h + l] = uint8_t((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
    }
}

}  // namespace

void quantize_row(QuantType t, const float* src, void* dst, int64_t n) {
  const QuantTraits tr = quant_traits(t);
  PAGODA_CHECK(t != QuantType::kNone && n % tr.block_elems == 0, "quantize_row: ", n, " weights of ", tr.name);
  uint8_t* b = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n / tr.block_elems; ++i, b += tr.block_bytes, src += tr.block_elems) {
    int q[256];
    switch (t) {
      case QuantType::kQ4_0:
        quantize_sym(src, 8, b, q);
        pack_nibbles16(q, b + 2);
        break;
      case QuantType::kQ5_0:
        quantize_sym(src, 16, b, q);
        pack_high_bits32(q, b + 2);
        pack_nibbles16(q, b + 6);
        break;
      case QuantType::kQ4_1:
        quantize_min(src, 15, b, b + 2, q);
        pack_nibbles16(q, b + 4);
        break;
      case QuantType::kQ5_1:
        quantize_min(src, 31, b, b + 2, q);
        pack_high_bits32(q, b + 4);
        pack_nibbles16(q, b + 8);
        break;
      case QuantType::kQ8_0: {
        float amax = 0;
        for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(src[l]));
        const uint16_t dh = f16_up(amax / 127.0f);
        store_f16(b, dh);
        const float d = f16_to_f32(dh);
        for (int l = 0; l < 32; ++l) b[2 + l] = uint8_t(int8_t(d > 0 ? round_clamp(src[l] / d, -127, 127) : 0));
        break;
      }
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: {
        const bool q5 = t == QuantType::kQ5_K;
        quantize_k(src, q5 ? 31 : 15, b, q);
        uint8_t* qs = b + (q5 ? 48 : 16);
        if (q5) std::memset(b + 16, 0, 32);
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 32; ++l) {
            const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
            qs[32 * c + l] = uint8_t((lo & 0x0F) | ((hi & 0x0F) << 4));
            if (q5) b[16 + l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
          }
        break;
      }
      case QuantType::kQ6_K: quantize_q6_k(src, b); break;
      case QuantType::kNone: break;
    }
  }
}

}  // namespace pagoda
