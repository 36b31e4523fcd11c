// The engine's configuration tree (model, cache, scheduler, attention, device, server), declared once:
// register_engine_options() gives each field its option name, default, help and setter, and the CLI,
// the config files and the startup dump all come from it. validate_engine_args() checks the values in
// the order of spec §9.7 and returns the frozen, validated settings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pagoda/config/arg_parser.h"
#include "pagoda/config/attention_config.h"
#include "pagoda/config/env.h"
#include "pagoda/core/dtype.h"

namespace pagoda {

inline const std::vector<std::string>& kv_cache_dtype_choices() {
  static const std::vector<std::string> k = {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                                             "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                                             "turboquant_3bit_nc"};
  return k;
}

// Upper bounds on the numeric engine options, each far above any real deployment and low enough that the
// sizes the engine derives from them (blocks per sequence, sequences x blocks, tokens x hidden size) fit
// in 64 bits and a length plus a block size fits in int32. A value above one is refused with a clear
// error instead of overflowing or allocating until the machine runs out of memory.
inline constexpr int kMaxModelLen = 1 << 24;          // = kMaxPositionEmbeddings of config.json (model_config.h)
inline constexpr int kMaxBlockSize = 1 << 16;         // tokens per KV-cache block; backends use 16 to 256
inline constexpr int kMaxNumSeqs = 1 << 16;           // sequences per step
inline constexpr int kMaxNumBatchedTokens = 1 << 24;  // tokens per step

struct ModelArgs {
  // A local directory, a GGUF file, a Hugging Face repo id, or a built-in: "smollm2:135m" (the default, a real
  // model: model/builtin_models.h's kDefaultModel), "dummy:tiny" and the other random-weight ones.
  std::string model = "smollm2:135m";
  std::string tokenizer;             // defaults to the model
  std::string revision = "main";
  std::string dtype = "auto";        // auto, bfloat16, float16, float32 (half, float)
  std::string load_format = "auto";  // auto, safetensors, gguf, dummy
  std::optional<int> max_model_len;
  int seed = 0;
};

struct CacheArgs {
  std::optional<int> block_size;  // set only when the user gave one (a selection input)
  std::string kv_cache_dtype = "auto";
  // Layers that keep an `auto` cache under a quantized kv_cache_dtype: indices ("3") and/or "sliding_window".
  std::vector<std::string> kv_cache_dtype_skip_layers;
  double gpu_memory_utilization = 0.9;
  double kv_cache_space_gib = 4.0;  // CPU: memory for the KV cache
  bool enable_prefix_caching = true;
  std::optional<int> num_gpu_blocks_override;
};

struct SchedulerArgs {
  int max_num_seqs = 256;
  std::optional<int> max_num_batched_tokens;
  bool enable_chunked_prefill = true;
};

struct AttentionArgs {
  std::optional<std::string> attention_backend;  // raw text of --attention-backend
  std::optional<std::string> attention_config;   // raw JSON of the last --attention-config / -ac
  bool batch_invariant = false;
};

struct DeviceArgs {
  std::string device = "auto";  // auto, cuda, cpu
  int cpu_threads = 0;          // CPU forward pass threads, the caller included; 0 = one per hardware thread
  bool enforce_eager = false;
  std::string log_level;        // empty: PAGODA_LOGGING_LEVEL or INFO
};

struct ServerArgs {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string api_key;
  std::vector<std::string> served_model_name;
  double shutdown_timeout_s = 0;             // drain before aborting on SIGTERM (vLLM's default: none)
  double timeout_keep_alive_s = 5;           // idle kept-alive connection (uvicorn's default)
  double http_request_timeout_s = 60;        // one request's headers and body, first byte to last
  int h11_max_incomplete_event_size = 4 << 20;  // request line + headers, bytes (vLLM's default)
  int h11_max_header_count = 256;               // (vLLM's default)
  int max_request_body_bytes = 32 << 20;
  int max_connections = 4096;
  int max_concurrent_requests = 512;
  int max_logprobs = 20;  // vLLM's default
};

struct EngineArgs {
  ModelArgs model;
  CacheArgs cache;
  SchedulerArgs scheduler;
  AttentionArgs attention;
  DeviceArgs device;
  ServerArgs server;
};

enum class EngineOptionSet { kEngine, kServe, kExplain };
// Declares the engine options on `parser`, writing into `args`. kServe adds the server section.
// kExplain declares the subset `pagoda backends select` documents (plus log level and config files).
void register_engine_options(ArgParser& parser, EngineArgs& args, EngineOptionSet set);

// The items of --kv-cache-dtype-skip-layers ("0,5,sliding_window"): each a layer index or sliding_window.
// Throws a config error for any other item.
std::vector<std::string> parse_kv_cache_dtype_skip_layers(const std::string& value);

enum class DTypeChoice { kAuto, kBFloat16, kFloat16, kFloat32 };

struct ValidatedArgs {
  AttentionConfig attention_config;
  std::string kv_cache_dtype;     // one of kv_cache_dtype_choices()
  std::optional<int> block_size;  // the user's, when given
  DTypeChoice dtype = DTypeChoice::kAuto;
  EnvSettings env;
  bool batch_invariant = false;   // --batch-invariant or PAGODA_BATCH_INVARIANT=1
};

// §9.7 from "AttentionConfig validation" on: attention config, option values (including the bounds
// above and finite, positive memory fractions), environment, mutual exclusion, backend name. Throws
// config errors (exit status 2).
ValidatedArgs validate_engine_args(const EngineArgs& args);

// §9.3 --dtype resolution: auto is the checkpoint's dtype when bfloat16 or float16, else bfloat16; on
// CUDA below SM 8.0 an auto bfloat16 becomes float16.
DType resolve_model_dtype(DTypeChoice choice, std::optional<DType> checkpoint, bool cuda_below_sm80);

}  // namespace pagoda
