// rope_kv's TurboQuant path on the device: every written slot bitwise the float64 model's encoding
// (turboquant_encode_reference) of the rotated k the kernel left in `k` and of v, for every preset, both 16-bit
// dtypes, head sizes 64, 80, 128 and 256, GQA and padding tokens; slots of padding tokens and all others stay
// as they were (poisoned). The encoder's arithmetic is also checked on the host
// (rope_kv_turboquant_emulation_test.cc); RoPE itself by rope_kv_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "gpu_test_util.h"
#include "pagoda/core/turboquant.h"
#include "pagoda/ops/cuda/rope_kv.h"

namespace pagoda {
namespace {

using test::HostArray;

void run_case(const TurboQuantPreset& preset, DType dt, int hd, int nkv, int gqa, int block_size, int T,
              test::Rng& rng) {
  SCOPED_TRACE(std::string(preset.name) + " " + std::string(dtype_name(dt)) + " hd=" + std::to_string(hd) +
               " kv=" + std::to_string(nkv) + " tokens=" + std::to_string(T) + " " + test::seed_note());
  constexpr int kMaxPosition = 4096;
  const int nq = nkv * gqa;
  const TurboQuantLayout L = turboquant_layout(preset, hd);
  const RopeTable table = build_rope_table(kMaxPosition, hd, 10000.0);
  const int64_t row = int64_t(nq + 2 * nkv) * hd;  // fused qkv
  HostArray qkv = test::random_array(rng, dt, size_t(T) * row);
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (auto& p : positions) p = rng.integer(0, kMaxPosition - 1);
  const int num_blocks = T / block_size + 3;
  std::vector<int64_t> all(size_t(num_blocks) * block_size);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.gen());
  std::vector<int64_t> slots(all.begin(), all.begin() + T);
  for (int t = 0; t < T; ++t)
    if (rng.integer(0, 9) == 0) slots[size_t(t)] = -1;
  DeviceBuffer dqkv = test::to_device(qkv), dpos = test::to_device(positions), dslots = test::to_device(slots);
  DeviceBuffer dcos = test::to_device(table.cos), dsin = test::to_device(table.sin);
  const size_t cache_bytes = size_t(num_blocks) * block_size * nkv * L.slot_bytes;
  DeviceBuffer dcache = test::poisoned(cache_bytes);
  DeviceBuffer dflag = test::to_device(std::vector<int>{0});
  const size_t es = dtype_size(dt);
  RopeKvParams p;
  p.q = dqkv.data();
  p.k = dqkv.as<char>() + size_t(nq) * hd * es;
  p.v = dqkv.as<char>() + size_t(nq + nkv) * hd * es;
  p.q_stride = p.k_stride = p.v_stride = row;
  p.positions = dpos.as<int64_t>(), p.cos = dcos.as<float>(), p.sin = dsin.as<float>(), p.max_position = kMaxPosition;
  p.num_tokens = T, p.num_q_heads = nq, p.num_kv_heads = nkv, p.head_dim = hd, p.dtype = dt;
  p.kv_cache = dcache.data(), p.slot_mapping = dslots.as<int64_t>(), p.num_blocks = num_blocks;
  p.block_size = block_size, p.layout = KvLayout::kNHD;  // ignored: TurboQuant slots are [block][head][token]
  p.cache_dtype = DType::kU8;
  p.turboquant.key_bits = preset.key_bits;
  p.turboquant.value_bits = preset.value_bits;
  p.turboquant.norm_correction = preset.norm_correction;
  p.turboquant.layer = 13;
  std::vector<float> cb;
  if (preset.key_bits != 8) {
    cb = turboquant_codebook(preset.key_bits, hd);
    const std::vector<float> b = turboquant_boundaries(cb);
    std::copy(b.begin(), b.end(), p.turboquant.boundaries);
  }
  p.error_flag = dflag.as<int>();
  rope_kv(p, nullptr);
  test::sync_and_check();
  EXPECT_EQ(test::from_device<int>(dflag, 1)[0], 0);
  const HostArray out = test::from_device(dqkv, dt, size_t(T) * row);
  std::vector<uint8_t> cache(cache_bytes);
  dcache.download(cache.data(), cache_bytes);
  std::vector<uint8_t> written(cache_bytes, 0), ref(size_t(L.slot_bytes));
  std::vector<double> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd));
  int mismatches = 0;
  for (int t = 0; t < T; ++t) {
    const int64_t s = slots[size_t(t)];
    if (s < 0) continue;
    for (int h = 0; h < nkv; ++h) {
      for (int i = 0; i < hd; ++i) {
        k[size_t(i)] = out.get(size_t(t) * row + size_t(nq + h) * hd + i);         // rotated by the kernel
        v[size_t(i)] = qkv.get(size_t(t) * row + size_t(nq + nkv + h) * hd + i);  // the input
      }
      turboquant_encode_reference(L, cb, p.turboquant.layer, k.data(), v.data(), ref.data());
      const size_t at = ((size_t(s) / block_size * nkv + h) * block_size + size_t(s) % block_size) * L.slot_bytes;
      for (int b = 0; b < L.slot_bytes; ++b) {
        written[at + b] = 1;
        if (cache[at + b] != ref[size_t(b)] && ++mismatches <= 5)
          ADD_FAILURE() << "token " << t << " head " << h << " byte " << b << ": " << int(cache[at + b])
                        << ", the model " << int(ref[size_t(b)]);
      }
    }
  }
  size_t touched = 0;
  for (size_t i = 0; i < cache_bytes; ++i) touched += !written[i] && cache[i] != test::kPoisonByte;
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(touched, 0u) << "bytes outside the step's slots were written";
}

TEST(RopeKvTurboQuant, SlotsBitwiseTheFloat64Model) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  test::Rng rng(5);
  for (const TurboQuantPreset& preset : kTurboQuantPresets)
    for (DType dt : {DType::kBF16, DType::kF16}) {
      run_case(preset, dt, 128, 8, 4, 16, 97, rng);
      run_case(preset, dt, 64, 3, 3, 64, 17, rng);
      run_case(preset, dt, 80, 2, 1, 32, 7, rng);
      run_case(preset, dt, 256, 1, 8, 128, 513, rng);
      run_case(preset, dt, 128, 2, 4, 16, 1, rng);
    }
}

}  // namespace
}  // namespace pagoda
