// PRIVATE to ops/cuda: the TurboQuant slot encoder of rope_kv's TurboQuant path (rope_kv.h): one warp turns the
// rotated-by-RoPE key and the value of one (token, KV head) into the packed slot of core/turboquant.h.
//
// It computes what the float64 model (turboquant_encode_reference) computes, with the same double operations
// in the same order and none fused (explicit round-to-nearest intrinsics on the device: nvcc would otherwise
// contract a * b + c), so the slots are bitwise the model's: the sign flip and the normalised Walsh-Hadamard
// butterflies stage by stage, the norm of the unrotated key summed in index order, x_i = r_i sqrt(d) / norm
// against the float boundaries, the fp16 and FP8 roundings from double (saturating), and the values' min, max,
// scale, zero and round-half-even codes.
//
// Written against an `Ops` policy (sync_warp) and plain loads and stores, so it also runs on the host, a
// thread per lane (tests/ops_cuda/rope_kv_turboquant_test.cc).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagoda/core/turboquant.h"

#define PAGODA_TQE_DEV __host__ __device__ __forceinline__

namespace pagoda::tq_encode {

// The preset and layer of a TurboQuant cache write (by value in the kernel's arguments).
struct EncodeParams {
  TurboQuantLayout layout;  // turboquant_layout(key_bits, value_bits, norm_correction, head_dim)
  int layer = 0;            // the rotation's seed
  float boundaries[15] = {};  // turboquant_boundaries of the key codebook (3/4-bit keys)
};

// Per-warp scratch in shared memory: x[d] doubles, then d key codes and d value codes, then 1 double.
PAGODA_TQE_DEV int scratch_bytes(int head_dim) { return 8 * head_dim + 2 * head_dim + 8 + 8; }

PAGODA_TQE_DEV double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
PAGODA_TQE_DEV double dadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
PAGODA_TQE_DEV double dsub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
PAGODA_TQE_DEV double ddiv(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
PAGODA_TQE_DEV double dsqrt(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
PAGODA_TQE_DEV double drint(double a) {
#ifdef __CUDA_ARCH__
  return rint(a);
#else
  return std::nearbyint(a);
#endif
}

// fp16 of x (finite), nearest even, saturating at +-65504; the bits.
PAGODA_TQE_DEV uint16_t f16_sat(double x) {
  const double c = x > 65504.0 ? 65504.0 : x < -65504.0 ? -65504.0 : x;
  return __half_raw(__double2half(c)).x;
}
// Stores fp16 bits at p (2-byte aligned: every fp16 field of a slot is at an even offset) as one 16-bit store.
// Two byte stores are wrong on the device: ptxas (CUDA 13.0, sm_90a) folds `cvt.rn.f16.f64` followed by
// `st.u8` of its register into a value conversion, so the low byte came out as the fp16's integer part
// (0x2fe7, the fp16 of 0.1235, stored its low byte as 0x00), measured on the H200.
PAGODA_TQE_DEV void store_f16(uint8_t* p, uint16_t bits) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint16_t*>(p) = bits;
#else
  std::memcpy(p, &bits, 2);
#endif
}
PAGODA_TQE_DEV double f16_double(uint16_t bits) {
  __half_raw r;
  r.x = bits;
  return double(__half2float(__half(r)));
}

// The slot of one (token, KV head): k (the key after RoPE, as stored in the model dtype) and v, head_dim
// floats each, any memory the warp can read; slot: layout.slot_bytes bytes, 2-byte aligned. `scratch`:
// scratch_bytes(head_dim) bytes of the warp's shared memory, 8-byte aligned. All 32 lanes call it.
template <class Ops>
PAGODA_TQE_DEV void encode_slot(const EncodeParams& e, const float* k, const float* v, uint8_t* slot,
                                uint8_t* scratch, int lane) {
  const TurboQuantLayout& L = e.layout;
  const int d = L.head_size;
  double* x = reinterpret_cast<double*>(scratch);
  uint8_t* kc = scratch + 8 * d;
  uint8_t* vc = kc + d;
  double* shared = reinterpret_cast<double*>(scratch + ((10 * d + 7) & ~7));
  // ---- keys: r = H (s . k) ----
  for (int i = lane; i < d; i += 32) {
    const double ki = k[i];
    x[i] = turboquant_sign_negative(e.layer, i) ? -ki : ki;
  }
  Ops::sync_warp();
  for (int c = 0, n = turboquant_num_chunks(d); c < n; ++c) {
    int begin, size;
    turboquant_chunk(d, c, &begin, &size);
    for (int h = 1; h < size; h *= 2) {
      for (int p = lane; p < size / 2; p += 32) {
        const int i = begin + (p / h) * 2 * h + p % h, j = i + h;
        const double a = x[i], b = x[j];
        x[i] = dadd(a, b);
        x[j] = dsub(a, b);
      }
      Ops::sync_warp();
    }
    const double s = ddiv(1.0, dsqrt(double(size)));
    for (int i = lane; i < size; i += 32) x[begin + i] = dmul(x[begin + i], s);
    Ops::sync_warp();
  }
  if (L.key_bits == 8) {
    for (int i = lane; i < d; i += 32) kc[i] = __nv_cvt_double_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
  } else {
    if (lane == 0) {  // the norm of the unrotated key, in index order
      double sq = 0;
      for (int i = 0; i < d; ++i) {
        const double ki = k[i];
        sq = dadd(sq, dmul(ki, ki));
      }
      shared[0] = dsqrt(sq);
    }
    Ops::sync_warp();
    const double norm = shared[0];
    const double sd = dsqrt(double(d));
    const int nb = (1 << L.key_bits) - 1;
    for (int i = lane; i < d; i += 32) {
      const double xi = norm > 0 ? ddiv(dmul(x[i], sd), norm) : 0.0;
      int code = 0;
      for (int b = 0; b < nb; ++b) code += double(e.boundaries[b]) < xi;
      kc[i] = uint8_t(code);
    }
    if (lane == 0) {
      const uint16_t nh = f16_sat(norm);
      store_f16(slot + L.key_norm_offset, nh);
    }
  }
  // ---- values ----
  Ops::sync_warp();  // every lane has read the norm before lane 0 reuses its place
  if (lane == 0) {
    double lo = v[0], hi = v[0];
    for (int i = 1; i < d; ++i) {
      const double vi = v[i];
      lo = vi < lo ? vi : lo;
      hi = vi > hi ? vi : hi;
    }
    const int qmax = (1 << L.value_bits) - 1;
    const uint16_t zero_h = f16_sat(lo);
    const uint16_t scale_h = f16_sat(ddiv(dsub(hi, f16_double(zero_h)), double(qmax)));
    store_f16(slot + L.value_scale_offset, scale_h);
    store_f16(slot + L.value_zero_offset, zero_h);
    shared[0] = f16_double(zero_h);
    shared[1] = f16_double(scale_h);
  }
  Ops::sync_warp();
  {
    const double zero = shared[0], scale = shared[1];
    const double qmax = double((1 << L.value_bits) - 1);
    for (int i = lane; i < d; i += 32) {
      double q = scale == 0 ? 0.0 : drint(ddiv(dsub(double(v[i]), zero), scale));
      q = q < 0 ? 0 : q > qmax ? qmax : q;
      vc[i] = uint8_t(q);
    }
  }
  Ops::sync_warp();
  // ---- pack the code fields (bit i * b + j of a field is bit j of code i) ----
  const int kbits = L.key_bits, vbits = L.value_bits;
  for (int byte = lane; byte < L.key_code_bytes; byte += 32) {
    unsigned out = 0;
    if (kbits == 8) {
      out = kc[byte];
    } else {
      for (int bit = 0; bit < 8; ++bit) {
        const int n = 8 * byte + bit, i = n / kbits;
        if (i < d) out |= ((unsigned(kc[i]) >> (n - i * kbits)) & 1u) << bit;
      }
    }
    slot[byte] = uint8_t(out);
  }
  for (int byte = lane; byte < L.value_code_bytes; byte += 32) {
    unsigned out = 0;
    for (int bit = 0; bit < 8; ++bit) {
      const int n = 8 * byte + bit, i = n / vbits;
      if (i < d) out |= ((unsigned(vc[i]) >> (n - i * vbits)) & 1u) << bit;
    }
    slot[L.value_offset + byte] = uint8_t(out);
  }
  if (lane == 0 && L.value_zero_offset + 2 < L.slot_bytes) slot[L.slot_bytes - 1] = 0;  // the padding byte
  Ops::sync_warp();  // the scratch is free for the warp's next slot
}

}  // namespace pagoda::tq_encode
