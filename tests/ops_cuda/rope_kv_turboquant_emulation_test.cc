// The TurboQuant slot encoder of rope_kv (ops/cuda/rope_kv_turboquant.cuh) run on the host, a thread per lane:
// its slots must be bitwise the float64 model's (turboquant_encode_reference) for every preset and head size,
// including a zero key (norm 0), a constant value (scale 0), keys and values beyond fp16 and FP8 range
// (saturation) and keys with tiny norms. rope_kv_turboquant_test.cc runs the compiled kernel on the device.
#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/rope_kv_turboquant.cuh"

namespace pagoda {
namespace {

thread_local std::barrier<>* t_bar = nullptr;
struct HostOps {
  static void sync_warp() { t_bar->arrive_and_wait(); }
};

// The warp's slot for k and v (floats, as the kernel stages them), encoded by 32 host threads.
std::vector<uint8_t> encode_emulated(const tq_encode::EncodeParams& e, const std::vector<float>& k,
                                     const std::vector<float>& v) {
  const int d = e.layout.head_size;
  std::vector<uint8_t> slot(size_t(e.layout.slot_bytes), 0xa5);  // every byte must be written
  std::vector<uint64_t> scratch((size_t(tq_encode::scratch_bytes(d)) + 7) / 8);
  std::barrier<> bar(32);
  std::vector<std::thread> lanes;
  for (int lane = 0; lane < 32; ++lane)
    lanes.emplace_back([&, lane] {
      t_bar = &bar;
      tq_encode::encode_slot<HostOps>(e, k.data(), v.data(), slot.data(), reinterpret_cast<uint8_t*>(scratch.data()),
                                      lane);
    });
  for (auto& t : lanes) t.join();
  return slot;
}

TEST(RopeKvTurboQuantEncoder, BitwiseTheFloat64Model) {
  test::Rng rng(11);
  int slots = 0;
  for (const TurboQuantPreset& p : kTurboQuantPresets)
    for (int d : {8, 24, 40, 64, 80, 96, 128, 192, 256, 512}) {
      SCOPED_TRACE(std::string(p.name) + " d=" + std::to_string(d) + " " + test::seed_note());
      tq_encode::EncodeParams e;
      e.layout = turboquant_layout(p, d);
      e.layer = d % 7;
      std::vector<float> cb;
      if (p.key_bits != 8) {
        cb = turboquant_codebook(p.key_bits, d);
        const std::vector<float> b = turboquant_boundaries(cb);
        for (size_t i = 0; i < b.size(); ++i) e.boundaries[i] = b[i];
      }
      for (int kind = 0; kind < 7; ++kind) {
        std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
        for (int i = 0; i < d; ++i) {
          // bf16-representable values, as the kernel's k and v are.
          k[size_t(i)] = bf16_to_f32(f32_to_bf16(rng.normal(kind == 4 ? 300.f : kind == 5 ? 1e-3f : 1.f)));
          v[size_t(i)] = bf16_to_f32(f32_to_bf16(rng.normal(kind == 4 ? 3e4f : 1.f)));
        }
        if (kind == 1) std::fill(k.begin(), k.end(), 0.f);  // norm 0: codes of x = 0
        if (kind == 2) std::fill(v.begin(), v.end(), 0.75f);  // scale 0: codes 0
        if (kind == 3) v[size_t(d / 2)] = 1e6f;               // beyond fp16: scale saturates
        if (kind == 6) k[0] = 7e4f;                           // norm beyond fp16, FP8 keys saturate
        std::vector<double> kd(k.begin(), k.end()), vd(v.begin(), v.end());
        std::vector<uint8_t> ref(size_t(e.layout.slot_bytes));
        turboquant_encode_reference(e.layout, cb, e.layer, kd.data(), vd.data(), ref.data());
        const std::vector<uint8_t> got = encode_emulated(e, k, v);
        for (int b = 0; b < e.layout.slot_bytes; ++b)
          ASSERT_EQ(int(got[size_t(b)]), int(ref[size_t(b)])) << "byte " << b << " of " << e.layout.slot_bytes
                                                              << ", input kind " << kind;
        ++slots;
      }
    }
  std::printf("%d slots bitwise equal to the float64 model\n", slots);
}

}  // namespace
}  // namespace pagoda
