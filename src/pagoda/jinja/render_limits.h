// Bounds on one rendering of a Jinja template (render_template in eval.h; the chat template's
// RenderLimits).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "pagoda/core/json_depth.h"

namespace pagoda::jinja {

// Bounds on one rendering, for templates and inputs that come from users (a template file, messages,
// tools, chat_template_kwargs). Past one, rendering stops with pagoda::Error (kRuntime) naming it. The
// defaults are far above what real templates need (a long conversation through Qwen3's or Llama 3.1's
// template takes a few thousand steps) and keep a hostile one to about a second and tens of MiB.
struct RenderLimits {
  // Work: a step per statement and expression, four per loop iteration, one per 16 bytes of each string
  // the renderer builds, copies or writes out, one per 8 items of each list or dict an expression gives,
  // and one per 64 nodes (or 1 KiB of strings) of each list or dict an operation walks (compares, prints,
  // sorts, iterates).
  int64_t max_steps = 10'000'000;
  // The rendered text, and each string or list built on the way ('x' * n, a join, a list concatenation).
  size_t max_output_bytes = size_t{16} << 20;
  // Nesting of the JSON arrays and objects in messages, tools and kwargs (capped at 256 levels).
  int max_input_depth = kMaxJsonDepth;
  // Wall-clock limit from the start of the rendering; zero means none.
  std::chrono::steady_clock::duration timeout{0};
  // When set (by any thread) the rendering stops within about a thousand steps: "rendering cancelled".
  // May be null; otherwise it must outlive the call.
  const std::atomic<bool>* cancel = nullptr;
};

}  // namespace pagoda::jinja
