// The one switch over the block formats: per-format kernels (CPU and CUDA) are chosen through it.
#pragma once

#include <type_traits>

#include "pagoda/core/quant_type.h"

namespace pagoda {

// Calls f(std::integral_constant<QuantType, Q>{}) for the block type t, so that f can instantiate a template
// on Q; kNone calls nothing (callers check for it with their own message).
template <typename F>
void visit_quant_type(QuantType t, F&& f) {
  using Q = QuantType;
  switch (t) {
    case Q::kQ4_0: f(std::integral_constant<Q, Q::kQ4_0>{}); return;
    case Q::kQ4_1: f(std::integral_constant<Q, Q::kQ4_1>{}); return;
    case Q::kQ5_0: f(std::integral_constant<Q, Q::kQ5_0>{}); return;
    case Q::kQ5_1: f(std::integral_constant<Q, Q::kQ5_1>{}); return;
    case Q::kQ8_0: f(std::integral_constant<Q, Q::kQ8_0>{}); return;
    case Q::kQ4_K: f(std::integral_constant<Q, Q::kQ4_K>{}); return;
    case Q::kQ5_K: f(std::integral_constant<Q, Q::kQ5_K>{}); return;
    case Q::kQ6_K: f(std::integral_constant<Q, Q::kQ6_K>{}); return;
    case Q::kNone: return;
  }
}

}  // namespace pagoda
