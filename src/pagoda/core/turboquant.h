// The TurboQuant KV-cache format (spec §3.7): what one slot of a `turboquant_*` cache holds, and the pieces
// every encoder and decoder of it shares (CPU runner, CUDA kernels, the float64 model in the tests).
//
// A slot is the packed key then the packed value of one (token, KV head), `slot_bytes` long (key + value
// rounded up to even). With d = head_size:
//
//   key, key_bits 3 or 4:  codes  ceil(d * key_bits / 8) bytes, then the norm ||k|| as fp16 (2 bytes)
//   key, key_bits 8:       d bytes of FP8 E4M3, the rotated key (saturated to +-448, nearest even)
//   value:                 codes  ceil(d * value_bits / 8) bytes, then scale as fp16, then zero as fp16
//
// fp16 fields are little-endian and may sit at any byte offset (memcpy them). Codes are a little-endian
// bit stream: code i occupies bits [i*b, i*b + b) of the field, bit n being bit (n % 8) of byte n / 8
// (for b = 4, byte j = code 2j | code 2j+1 << 4). Bits past the last code are zero.
//
// Keys are rotated: k~ = H (s . k), s the layer's random signs (turboquant_sign_word) and H the normalised
// Walsh-Hadamard transform (Sylvester order, entries +-1/sqrt(n)) applied to each power-of-two chunk of the
// head (turboquant_chunk: d = 128 is one chunk, d = 80 is 64 + 16). H and s are orthogonal, so
// q . k = (H s q) . (H s k): attention rotates the query once and never un-rotates a key. With 3/4-bit keys
// the code of coordinate i is the index of the codebook centroid nearest x_i = k~_i * sqrt(d) / ||k||
// (x = 0 when ||k|| = 0): the number of decision boundaries (midpoints of consecutive centroids) strictly
// below x_i. The codebook (turboquant_codebook) is the Lloyd-Max quantizer of the distribution of one
// coordinate of a uniformly random unit vector of R^d, scaled by sqrt(d).
// Decoding: c_i = centroid[code_i]; k~^ = norm * c / ||c|| with norm correction (the `_nc` presets), else
// norm * c / sqrt(d).
//
// Values are not rotated: zero = fp16(min_i v_i), scale = fp16((max_i v_i - zero) / (2^b - 1)) (both
// saturated to +-65504), code_i = clamp(round_half_even((v_i - zero) / scale), 0, 2^b - 1) (0 when
// scale == 0), decoded v^_i = zero + scale * code_i.
//
// Header-only parts are usable from CUDA device code (PAGODA_TQ_HD); the codebook and the float64
// reference are host functions (turboquant.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#if defined(__CUDACC__)
#define PAGODA_TQ_HD __host__ __device__ __forceinline__
#else
#define PAGODA_TQ_HD inline
#endif

namespace pagoda {

// The four presets of spec §3.7: (key bits, value bits, norm correction).
struct TurboQuantPreset {
  std::string_view name;  // "turboquant_k3v4_nc"
  int key_bits = 0;       // 3, 4, or 8 (FP8 E4M3 keys)
  int value_bits = 0;     // 3 or 4
  bool norm_correction = false;
};
inline constexpr TurboQuantPreset kTurboQuantPresets[] = {{"turboquant_k8v4", 8, 4, false},
                                                          {"turboquant_4bit_nc", 4, 4, true},
                                                          {"turboquant_k3v4_nc", 3, 4, true},
                                                          {"turboquant_3bit_nc", 3, 3, true}};
// nullopt when `kv_cache_dtype` is not a turboquant_* preset.
std::optional<TurboQuantPreset> turboquant_preset(std::string_view kv_cache_dtype);

// Byte offsets of one slot's fields (see the file comment).
struct TurboQuantLayout {
  int head_size = 0;
  int key_bits = 0, value_bits = 0;
  bool norm_correction = false;
  int key_code_bytes = 0;    // ceil(d * key_bits / 8), or d for FP8 keys
  int key_norm_offset = -1;  // fp16 norm; -1 for FP8 keys (no norm)
  int key_bytes = 0;         // key_code_bytes (+ 2)
  int value_offset = 0;      // == key_bytes
  int value_code_bytes = 0;  // ceil(d * value_bits / 8)
  int value_scale_offset = 0, value_zero_offset = 0;  // fp16 each
  int value_bytes = 0;       // value_code_bytes + 4
  int slot_bytes = 0;        // key_bytes + value_bytes rounded up to even
};
constexpr TurboQuantLayout turboquant_layout(int key_bits, int value_bits, bool norm_correction, int head_size) {
  TurboQuantLayout l;
  l.head_size = head_size;
  l.key_bits = key_bits;
  l.value_bits = value_bits;
  l.norm_correction = norm_correction;
  if (key_bits == 8) {
    l.key_code_bytes = head_size;
    l.key_bytes = head_size;
  } else {
    l.key_code_bytes = (head_size * key_bits + 7) / 8;
    l.key_norm_offset = l.key_code_bytes;
    l.key_bytes = l.key_code_bytes + 2;
  }
  l.value_offset = l.key_bytes;
  l.value_code_bytes = (head_size * value_bits + 7) / 8;
  l.value_scale_offset = l.value_offset + l.value_code_bytes;
  l.value_zero_offset = l.value_scale_offset + 2;
  l.value_bytes = l.value_code_bytes + 4;
  l.slot_bytes = (l.key_bytes + l.value_bytes + 1) / 2 * 2;
  return l;
}
inline TurboQuantLayout turboquant_layout(const TurboQuantPreset& p, int head_size) {
  return turboquant_layout(p.key_bits, p.value_bits, p.norm_correction, head_size);
}

// ---- rotation ----

PAGODA_TQ_HD uint64_t turboquant_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Signs of coordinates [64 w, 64 w + 64) of `layer`'s keys and queries: bit j set means s = -1 for
// coordinate 64 w + j. A fixed seed: every run, device and backend rotates alike.
inline constexpr uint64_t kTurboQuantSeed = 0x7475726271756e74ull;  // "turboqnt"
PAGODA_TQ_HD uint64_t turboquant_sign_word(int layer, int w) {
  return turboquant_splitmix64(kTurboQuantSeed ^ (uint64_t(uint32_t(layer)) << 32) ^ uint64_t(uint32_t(w)));
}
PAGODA_TQ_HD bool turboquant_sign_negative(int layer, int i) {
  return (turboquant_sign_word(layer, i >> 6) >> (i & 63)) & 1u;
}
// The power-of-two chunks the Hadamard transform works on: chunk c of a head of d coordinates starts where
// the previous one ended and has the size of the c-th highest set bit of d (d = 80: [0, 64), [64, 80)).
// Returns the number of chunks (the number of set bits of d).
PAGODA_TQ_HD int turboquant_num_chunks(int head_size) {
  int n = 0;
  for (unsigned v = unsigned(head_size); v; v &= v - 1) ++n;
  return n;
}
PAGODA_TQ_HD void turboquant_chunk(int head_size, int c, int* begin, int* size) {
  int start = 0;
  for (int bit = 30; bit >= 0; --bit) {
    if (!((head_size >> bit) & 1)) continue;
    if (c-- == 0) {
      *begin = start;
      *size = 1 << bit;
      return;
    }
    start += 1 << bit;
  }
  *begin = head_size;
  *size = 0;
}

// ---- codebook ----

// The 2^bits centroids (ascending, symmetric about 0) of the Lloyd-Max quantizer of x = u_1 sqrt(d), u
// uniform on the unit sphere of R^d (density proportional to (1 - x^2/d)^((d-3)/2) on |x| < sqrt(d); d <= 2
// uses the Gaussian limit), computed in double by Lloyd's iteration to a fixed point and rounded to float.
// bits in {3, 4}. Deterministic: the same numbers on every machine.
std::vector<float> turboquant_codebook(int bits, int head_size);
// The 2^bits - 1 decision boundaries: midpoints of consecutive centroids, each rounded once to float (the
// values every encoder compares against).
std::vector<float> turboquant_boundaries(const std::vector<float>& codebook);
// The mean squared error per coordinate, E[(x - Q(x))^2] for x of the codebook's density (unit variance), of
// the float codebook with its float boundaries: the distortion a random unit vector's coordinates suffer.
double turboquant_codebook_mse(int bits, int head_size);

// ---- the float64 model of the format (the oracle of the tests) ----

// Encodes one (token, head): k and v of head_size doubles into `slot` (layout.slot_bytes bytes, padding
// zero), for `layer`'s rotation. Every rounding is the format's: fp16 and FP8 fields rounded to nearest
// even from the double value.
void turboquant_encode_reference(const TurboQuantLayout& layout, const std::vector<float>& codebook, int layer,
                                 const double* k, const double* v, uint8_t* slot);
// Decodes a slot: the rotated key k~^ (what attention dots the rotated query with), the key in the model's
// coordinates (H s)^T k~^, and the value, each head_size doubles (any may be null).
void turboquant_decode_reference(const TurboQuantLayout& layout, const std::vector<float>& codebook, int layer,
                                 const uint8_t* slot, double* k_rotated, double* k, double* v);
// Round a double to nearest even in fp16 (saturating at +-65504) and in FP8 E4M3 (saturating at +-448), the
// format's two roundings. Finite inputs only.
uint16_t turboquant_f16_from_double(double x);
uint8_t turboquant_e4m3_from_double(double x);
// x <- H (s . x) and its inverse, in double, for `layer` (head_size = the length of x).
void turboquant_rotate_reference(int layer, double* x, int head_size);
void turboquant_unrotate_reference(int layer, double* x, int head_size);

}  // namespace pagoda
