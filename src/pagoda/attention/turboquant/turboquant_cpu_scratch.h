// The per-thread scratch of the TURBOQUANT CPU kernels (turboquant_cpu.h). PRIVATE to attention/turboquant/.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

// Sized once by the workspace from the head size d, the block size and the GQA group (rows = 16 query tokens
// x group); per-key arrays and the key tile have the block size rounded up to 8 (bs8) entries / rows, since the
// scores and the softmax work 8 keys at a time. Nothing grows during a call.
struct TurboQuantCpuThreadScratch {
  std::vector<float> q;              // [rows, d] rotated, scaled queries of the work item
  std::vector<float> k;              // [bs8, d] decoded centroids (or FP8 keys)
  std::vector<float> v;              // [block_size, d] value codes as floats
  std::vector<float> kf, vs, vz;     // [bs8] key factor (norm / ||c||), value scale, value zero
  std::vector<float> scores, pw;     // [bs8] scores, then p_j * scale_j
  std::vector<float> m, l, z;        // [rows] running max, denominator, sum p * zero
  std::vector<float> acc;            // [rows, d] running sum (p * scale) * code
  std::vector<float> rot;            // [d] the encoder's rotated key
  std::vector<int32_t> codes;        // [d] the encoder's codes
};

// masks[i] = 0x80000000 where `layer`'s sign s_i = -1, else 0 (i < head_size).
void turboquant_cpu_fill_signs(int layer, int head_size, uint32_t* masks);

}  // namespace pagoda
