// Engine start shared by every command that runs a model (generate, serve, bench): device, model
// resolution (local folder, Hugging Face cache or hub, dummy:tiny), config, per-layer attention backend
// selection with the startup log lines, weights, KV cache sizing, tokenizer and the model runner.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/attention/startup.h"
#include "pagoda/config/engine_args.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/model_runner.h"
#include "pagoda/platform/device.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

struct EngineSetup {
  DeviceInfo device;
  std::string model_name;  // as given
  std::string model_dir;   // resolved folder ("" for dummy:tiny)
  LoadedModel model;
  DType model_dtype = DType::kF32;
  std::string kv_cache_dtype;                       // the model's (effective_kv_cache_dtype)
  std::vector<std::string> layer_kv_cache_dtypes;   // per layer: kv_cache_dtype, or `auto` (boundary/skip layers)
  int64_t kv_bytes_per_block = 0;                   // one block of every layer's cache
  std::vector<BackendName> layer_backends;
  AttentionPlan attention;
  int max_model_len = 0;
  std::optional<Tokenizer> tokenizer;
  std::unique_ptr<ModelRunner> runner;
};

// Throws pagoda::Error: config errors (exit 2) for bad options, runtime errors (exit 1) otherwise.
EngineSetup setup_engine(const EngineArgs& args, const ValidatedArgs& validated);

// The toy byte-level tokenizer of dummy:tiny (ids 0-2 <pad>/<s>/</s>, 3-258 the bytes, the rest special).
Tokenizer dummy_tiny_tokenizer();

}  // namespace pagoda
