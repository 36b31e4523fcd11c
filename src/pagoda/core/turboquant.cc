// The TurboQuant codebook generator and the float64 model of the slot format (turboquant.h).
//
// Codebook derivation. Rotating a key by a random orthogonal map makes its direction u = k~ / ||k|| (nearly)
// uniform on the unit sphere S^{d-1}, so each coordinate is quantized as a sample of the marginal of one
// coordinate of a uniform unit vector. That marginal has density proportional to (1 - t^2)^((d-3)/2) on
// (-1, 1) (the slice of S^{d-1} at u_1 = t is a sphere S^{d-2} of radius sqrt(1 - t^2), and the surface
// element contributes a further 1 / sqrt(1 - t^2)). Scaled to unit variance, x = u_1 sqrt(d) has
//
//     f(x) ∝ (1 - x^2/d)^((d-3)/2)   on |x| < sqrt(d)
//
// (E[u_1^2] = 1/d, so Var x = 1; d = 3 is the uniform density on [-sqrt 3, sqrt 3]; as d grows f tends to the
// standard normal density, which is also used for d <= 2, where f is degenerate or unbounded).
// The Lloyd-Max quantizer of f with n = 2^bits levels minimises E[(x - Q(x))^2]; its two necessary
// conditions are that each decision boundary is the midpoint of its two centroids and that each centroid is
// the conditional mean of f on its cell. Lloyd's iteration alternates the two and converges (f is
// log-concave, so the fixed point is unique). f is even, so the quantizer is computed on [0, R] with n/2
// positive centroids and mirrored; the middle boundary is 0. The integrals are composite Gauss-Legendre
// quadratures in double (kPanels panels of 16 nodes per cell); R = min(sqrt(d), kTail), past which f's mass
// is below 1e-30. The iteration stops when no centroid moves by 1e-12.
#include "pagoda/core/turboquant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"

namespace pagoda {

std::optional<TurboQuantPreset> turboquant_preset(std::string_view kv_cache_dtype) {
  for (const auto& p : kTurboQuantPresets)
    if (p.name == kv_cache_dtype) return p;
  return std::nullopt;
}

namespace {

constexpr int kNodes = 16;
constexpr int kPanels = 24;
constexpr double kTail = 13.0;  // f(13) / f(0) < 1e-36 for every d where the tail matters (d > 169)
constexpr int kMaxIterations = 200000;
constexpr double kTolerance = 1e-12;

// Gauss-Legendre nodes and weights on [-1, 1], by Newton's method on P_n.
struct GaussLegendre {
  std::array<double, kNodes> x{}, w{};
  GaussLegendre() {
    for (int i = 0; i < kNodes; ++i) {
      double t = std::cos(M_PI * (i + 0.75) / (kNodes + 0.5));
      for (int it = 0; it < 100; ++it) {
        double p0 = 1, p1 = t;
        for (int k = 2; k <= kNodes; ++k) {
          const double p2 = ((2 * k - 1) * t * p1 - (k - 1) * p0) / k;
          p0 = p1;
          p1 = p2;
        }
        const double dp = kNodes * (t * p1 - p0) / (t * t - 1);
        const double dt = p1 / dp;
        t -= dt;
        if (std::abs(dt) < 1e-16) {
          x[size_t(i)] = t;
          w[size_t(i)] = 2 / ((1 - t * t) * dp * dp);
          break;
        }
      }
    }
  }
};

// The unnormalised density of x = u_1 sqrt(d) (see the file comment).
struct CoordinateDensity {
  int d;
  double operator()(double x) const {
    if (d <= 2) return std::exp(-0.5 * x * x);
    if (d == 3) return 1.0;
    const double t = 1 - x * x / d;
    return t <= 0 ? 0.0 : std::exp(0.5 * (d - 3) * std::log(t));
  }
  double support() const { return d <= 2 ? kTail : std::min(std::sqrt(double(d)), kTail); }
};

// (integral of f, integral of x f) over [a, b].
std::pair<double, double> cell_moments(const CoordinateDensity& f, const GaussLegendre& gl, double a, double b) {
  double m0 = 0, m1 = 0;
  const double h = (b - a) / kPanels;
  for (int p = 0; p < kPanels; ++p) {
    const double mid = a + (p + 0.5) * h;
    for (int i = 0; i < kNodes; ++i) {
      const double x = mid + 0.5 * h * gl.x[size_t(i)];
      const double wf = 0.5 * h * gl.w[size_t(i)] * f(x);
      m0 += wf;
      m1 += wf * x;
    }
  }
  return {m0, m1};
}

std::vector<float> generate_codebook(int bits, int d) {
  static const GaussLegendre gl;
  const CoordinateDensity f{d};
  const int half = 1 << (bits - 1);
  const double R = f.support();
  // Start from evenly spaced centroids inside the support; Lloyd's iteration keeps them ordered and every
  // cell non-empty (a conditional mean lies inside its cell, a midpoint between its centroids).
  std::vector<double> c(static_cast<size_t>(half)), b(static_cast<size_t>(half + 1));
  for (int k = 0; k < half; ++k) c[size_t(k)] = (k + 0.5) / half * std::min(3.0, R);
  bool converged = false;
  for (int it = 0; it < kMaxIterations && !converged; ++it) {
    b[0] = 0;
    for (int k = 1; k < half; ++k) b[size_t(k)] = 0.5 * (c[size_t(k - 1)] + c[size_t(k)]);
    b[size_t(half)] = R;
    double moved = 0;
    for (int k = 0; k < half; ++k) {
      const auto [m0, m1] = cell_moments(f, gl, b[size_t(k)], b[size_t(k + 1)]);
      PAGODA_CHECK(m0 > 0, "turboquant codebook: empty cell ", k, " (bits ", bits, ", d ", d, ")");
      const double next = m1 / m0;
      moved = std::max(moved, std::abs(next - c[size_t(k)]));
      c[size_t(k)] = next;
    }
    converged = moved < kTolerance;
  }
  PAGODA_CHECK(converged, "turboquant codebook: Lloyd's iteration did not converge (bits ", bits, ", d ", d, ")");
  std::vector<float> out(size_t(2 * half));
  for (int k = 0; k < half; ++k) {
    out[size_t(half + k)] = float(c[size_t(k)]);
    out[size_t(half - 1 - k)] = -float(c[size_t(k)]);
  }
  return out;
}

// Rounds a finite double to the grid of a binary float format with `mant` explicit mantissa bits and
// smallest normal exponent emin, nearest even, saturating at +-max_finite. The result is exactly
// representable in that format (and so in float).
double round_to_format(double x, int mant, int emin, double max_finite) {
  const double a = std::abs(x);
  if (!(a < max_finite)) return std::copysign(max_finite, x);  // also NaN -> max: callers pass finite values
  if (a == 0) return x;
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const double quantum = std::ldexp(1.0, std::max(e - 1, emin) - mant);
  const double r = std::min(std::nearbyint(a / quantum) * quantum, max_finite);
  return std::copysign(r, x);
}

// In-place normalised Walsh-Hadamard transform of n = 2^k doubles (Sylvester order).
void hadamard(double* x, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const double a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const double s = 1 / std::sqrt(double(n));
  for (int i = 0; i < n; ++i) x[i] *= s;
}

void hadamard_chunks(double* x, int head_size) {
  for (int c = 0, n = turboquant_num_chunks(head_size); c < n; ++c) {
    int begin, size;
    turboquant_chunk(head_size, c, &begin, &size);
    hadamard(x + begin, size);
  }
}

void put_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }
uint16_t get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

void put_code(uint8_t* field, int i, int bits, unsigned code) {
  for (int k = 0; k < bits; ++k)
    if ((code >> k) & 1u) field[(i * bits + k) / 8] |= uint8_t(1u << ((i * bits + k) % 8));
}
unsigned get_code(const uint8_t* field, int i, int bits) {
  unsigned code = 0;
  for (int k = 0; k < bits; ++k) code |= unsigned((field[(i * bits + k) / 8] >> ((i * bits + k) % 8)) & 1u) << k;
  return code;
}

}  // namespace

uint16_t turboquant_f16_from_double(double x) { return f32_to_f16(float(round_to_format(x, 10, -14, 65504.0))); }
uint8_t turboquant_e4m3_from_double(double x) { return f32_to_f8e4m3(float(round_to_format(x, 3, -6, 448.0))); }

std::vector<float> turboquant_codebook(int bits, int head_size) {
  PAGODA_CHECK(bits == 3 || bits == 4, "turboquant codebook: bits must be 3 or 4, got ", bits);
  PAGODA_CHECK(head_size > 0, "turboquant codebook: head size must be positive, got ", head_size);
  // Each (bits, d) is generated once per process: a few thousand Lloyd iterations.
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::vector<float>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = cache.try_emplace({bits, head_size});
  if (fresh) it->second = generate_codebook(bits, head_size);
  return it->second;
}

std::vector<float> turboquant_boundaries(const std::vector<float>& codebook) {
  std::vector<float> b;
  // (a + b) / 2 of two floats is exact in double; one rounding to float.
  for (size_t i = 0; i + 1 < codebook.size(); ++i) b.push_back(float(0.5 * (double(codebook[i]) + codebook[i + 1])));
  return b;
}

double turboquant_codebook_mse(int bits, int head_size) {
  static const GaussLegendre gl;
  const std::vector<float> c = turboquant_codebook(bits, head_size);
  const std::vector<float> b = turboquant_boundaries(c);
  const CoordinateDensity f{head_size};
  const double R = f.support();
  double mass = 0, err = 0;
  // Over [0, R] (f is even, the codebook symmetric): cells of the positive centroids, split at the float
  // boundaries actually used.
  const size_t half = c.size() / 2;
  for (size_t k = half; k < c.size(); ++k) {
    const double lo = k == half ? 0.0 : double(b[k - 1]), hi = k + 1 == c.size() ? R : double(b[k]);
    const double h = (hi - lo) / kPanels;
    for (int p = 0; p < kPanels; ++p)
      for (int i = 0; i < kNodes; ++i) {
        const double x = lo + (p + 0.5) * h + 0.5 * h * gl.x[size_t(i)];
        const double w = 0.5 * h * gl.w[size_t(i)] * f(x);
        mass += w;
        err += w * (x - c[k]) * (x - c[k]);
      }
  }
  return err / mass;
}

void turboquant_rotate_reference(int layer, double* x, int head_size) {
  for (int i = 0; i < head_size; ++i)
    if (turboquant_sign_negative(layer, i)) x[i] = -x[i];
  hadamard_chunks(x, head_size);
}

void turboquant_unrotate_reference(int layer, double* x, int head_size) {
  hadamard_chunks(x, head_size);  // H is symmetric and orthogonal: its own inverse
  for (int i = 0; i < head_size; ++i)
    if (turboquant_sign_negative(layer, i)) x[i] = -x[i];
}

void turboquant_encode_reference(const TurboQuantLayout& L, const std::vector<float>& codebook, int layer,
                                 const double* k, const double* v, uint8_t* slot) {
  const int d = L.head_size;
  std::memset(slot, 0, size_t(L.slot_bytes));
  std::vector<double> r(k, k + d);
  turboquant_rotate_reference(layer, r.data(), d);
  if (L.key_bits == 8) {
    for (int i = 0; i < d; ++i) slot[i] = turboquant_e4m3_from_double(r[size_t(i)]);
  } else {
    PAGODA_CHECK(codebook.size() == (size_t(1) << L.key_bits), "turboquant: a ", codebook.size(),
                 "-entry codebook for ", L.key_bits, "-bit keys");
    const std::vector<float> bounds = turboquant_boundaries(codebook);
    double sq = 0;
    for (int i = 0; i < d; ++i) sq += k[i] * k[i];
    const double norm = std::sqrt(sq);
    for (int i = 0; i < d; ++i) {
      const double x = norm > 0 ? r[size_t(i)] * std::sqrt(double(d)) / norm : 0.0;
      unsigned code = 0;
      for (float bd : bounds) code += double(bd) < x;
      put_code(slot, i, L.key_bits, code);
    }
    put_f16(slot + L.key_norm_offset, turboquant_f16_from_double(norm));
  }
  double lo = v[0], hi = v[0];
  for (int i = 1; i < d; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  const uint16_t zero_h = turboquant_f16_from_double(lo);
  const double zero = f16_to_f32(zero_h);
  const int qmax = (1 << L.value_bits) - 1;
  const uint16_t scale_h = turboquant_f16_from_double((hi - zero) / qmax);
  const double scale = f16_to_f32(scale_h);
  uint8_t* vf = slot + L.value_offset;
  for (int i = 0; i < d; ++i) {
    const double q = scale == 0 ? 0.0 : std::nearbyint((v[i] - zero) / scale);
    put_code(vf, i, L.value_bits, unsigned(std::clamp(q, 0.0, double(qmax))));
  }
  put_f16(slot + L.value_scale_offset, scale_h);
  put_f16(slot + L.value_zero_offset, zero_h);
}

void turboquant_decode_reference(const TurboQuantLayout& L, const std::vector<float>& codebook, int layer,
                                 const uint8_t* slot, double* k_rotated, double* k, double* v) {
  const int d = L.head_size;
  std::vector<double> r(static_cast<size_t>(d));
  if (L.key_bits == 8) {
    for (int i = 0; i < d; ++i) r[size_t(i)] = f8e4m3_to_f32(slot[i]);
  } else {
    double sq = 0;
    for (int i = 0; i < d; ++i) {
      r[size_t(i)] = codebook[get_code(slot, i, L.key_bits)];
      sq += r[size_t(i)] * r[size_t(i)];
    }
    const double norm = f16_to_f32(get_f16(slot + L.key_norm_offset));
    const double f = norm / (L.norm_correction ? std::sqrt(sq) : std::sqrt(double(d)));
    for (auto& x : r) x *= f;
  }
  if (k_rotated) std::copy(r.begin(), r.end(), k_rotated);
  if (k) {
    turboquant_unrotate_reference(layer, r.data(), d);
    std::copy(r.begin(), r.end(), k);
  }
  if (v) {
    const double scale = f16_to_f32(get_f16(slot + L.value_scale_offset));
    const double zero = f16_to_f32(get_f16(slot + L.value_zero_offset));
    for (int i = 0; i < d; ++i) v[i] = zero + scale * get_code(slot + L.value_offset, i, L.value_bits);
  }
}

}  // namespace pagoda
