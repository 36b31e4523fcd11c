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

// The device --device names: cpu, cuda, or auto (CUDA when found and this binary has the CUDA model path, else
// the CPU). Throws a runtime error for cuda without one.
DeviceInfo pick_engine_device(const std::string& choice);

// The model's config as engine start reads it, without weights: a built-in's, a GGUF file's header or a
// folder's config.json (--model resolved as setup_engine resolves it, hub included).
ModelConfig read_engine_model_config(const EngineArgs& args);

// What engine start selects for the attention layers, in setup_engine's order: each layer's KV cache dtype
// (effective_kv_cache_dtype, TurboQuant boundary and skipped layers at `auto`), its selector input, its
// backend, and the plan (block size, layout, FlashAttention version). `bench attention` runs the same.
struct EngineAttentionSelection {
  std::string kv_cache_dtype;                      // the model's (effective_kv_cache_dtype)
  std::vector<std::string> layer_kv_cache_dtypes;  // [num_layers]
  std::vector<bool> layer_sliding;                 // [num_layers]
  std::vector<SelectorConfig> layers;              // [num_layers], the selector's inputs
  LayerSelection selection;
};
// Throws the selection and construction errors (runtime) and option errors (config).
EngineAttentionSelection select_engine_attention(const ResolvedAttentionSettings& settings, const EngineArgs& args,
                                                 const ModelConfig& cfg, DType model_dtype, const DeviceInfo& device);

// Throws pagoda::Error: config errors (exit 2) for bad options, runtime errors (exit 1) otherwise.
// shared_model: the weights an earlier setup of the same model arguments loaded (its EngineSetup::model), used
// instead of loading them again, so that runners of different cache settings share one copy (bench perplexity).
EngineSetup setup_engine(const EngineArgs& args, const ValidatedArgs& validated,
                         const LoadedModel* shared_model = nullptr);

// The toy byte-level tokenizer of dummy:tiny (ids 0-2 <pad>/<s>/</s>, 3-258 the bytes, the rest special).
Tokenizer dummy_tiny_tokenizer();

}  // namespace pagoda
