// What FLEX_ATTENTION's runners (CPU and CUDA) take from a layer and the options: the mask of the layer's
// shape and the plan's tile sizes. PRIVATE to flex_attention/.
#pragma once

#include "pagoda/attention/flex_attention/flex_mask.h"
#include "pagoda/attention/runner.h"

namespace pagoda {

// Causal, causal within a sliding window, a window alone, or every key of the sequence (non-causal).
inline FlexMask flex_layer_mask(const LayerShape& s) {
  if (s.causal) return s.sliding_window > 0 ? FlexMask::causal() & FlexMask::sliding_window(s.sliding_window) : FlexMask::causal();
  return s.sliding_window > 0 ? FlexMask::sliding_window(s.sliding_window) : FlexMask::full();
}

// flex_attn_block_m / _n, else spec §6.5's defaults: 64/64, 16/16 under batch invariance. The kernels are
// batch invariant with any (a row's reduction order depends on block_n and its own sequence only).
struct FlexTiles {
  int block_m, block_n;
};
inline FlexTiles flex_layer_tiles(const RunnerOptions& o) {
  const int fallback = o.batch_invariant ? 16 : 64;
  return {o.flex_block_m > 0 ? o.flex_block_m : fallback, o.flex_block_n > 0 ? o.flex_block_n : fallback};
}

}  // namespace pagoda
