#include "pagoda/config/engine_args.h"

#include <cmath>
#include <cstdint>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::string show_opt_int(const std::optional<int>& v) { return v ? std::to_string(*v) : "None"; }
std::string show_bool(bool b) { return b ? "True" : "False"; }
std::string show_double(double d) {
  std::string s = std::to_string(d);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s += '0';
  return s;
}

constexpr std::string_view kMaxModelLenWhat = "pagoda's context length limit";
constexpr std::string_view kMaxBlockSizeWhat = "pagoda's limit on tokens per KV-cache block";
constexpr std::string_view kMaxNumSeqsWhat = "pagoda's limit on sequences per step";
constexpr std::string_view kMaxNumBatchedTokensWhat = "pagoda's limit on tokens per step";

// `value` of `option` in [1, max] (EngineArgs built in code skip the setters' upper bounds).
void check_range(const char* option, long long value, long long max, std::string_view what) {
  if (value < 1 || value > max)
    throw_config_error("Invalid ", option, ": ", value, ". It must be between 1 and ", max, " (", what, ").");
}

// A positive, finite amount of at most `max`, in `unit`.
void check_amount(const char* option, double value, double max, std::string_view unit) {
  if (!std::isfinite(value) || !(value > 0) || value > max)
    throw_config_error("Invalid ", option, ": ", value, ". It must be a number greater than 0 and at most ", max, unit, ".");
}

void check_sizes(const EngineArgs& a) {
  if (a.model.max_model_len) check_range("--max-model-len", *a.model.max_model_len, kMaxModelLen, kMaxModelLenWhat);
  if (a.cache.block_size) check_range("--block-size", *a.cache.block_size, kMaxBlockSize, kMaxBlockSizeWhat);
  check_range("--max-num-seqs", a.scheduler.max_num_seqs, kMaxNumSeqs, kMaxNumSeqsWhat);
  if (a.scheduler.max_num_batched_tokens)
    check_range("--max-num-batched-tokens", *a.scheduler.max_num_batched_tokens, kMaxNumBatchedTokens, kMaxNumBatchedTokensWhat);
  if (a.cache.num_gpu_blocks_override)
    check_range("--num-gpu-blocks-override", *a.cache.num_gpu_blocks_override, INT32_MAX, "KV-cache blocks");
  check_amount("--gpu-memory-utilization", a.cache.gpu_memory_utilization, 1.0, "");
  check_amount("--kv-cache-space", a.cache.kv_cache_space_gib, 1 << 20, " GiB");  // a pebibyte
}

}  // namespace

void register_engine_options(ArgParser& p, EngineArgs& a, EngineOptionSet set) {
  const bool full = set != EngineOptionSet::kExplain;
  // ---- model ----
  p.add({"--model", {}, "DIR|FILE|NAME", "Model: a local Hugging Face folder, a GGUF file, a Hugging Face repo id "
         "(looked up in the HF cache, downloaded when the network allows), or a built-in: smollm2:135m "
         "(SmolLM2-135M-Instruct Q4_1, fetched by scripts/fetch-models.sh) or dummy:tiny (random weights).", "model",
         [&a](const std::string& v) { a.model.model = v; }, [&a] { return a.model.model; }, {}});
  if (full) {
    p.add({"--tokenizer", {}, "DIR", "Tokenizer folder (default: the model's).", "model",
           [&a](const std::string& v) { a.model.tokenizer = v; }, [&a] { return a.model.tokenizer; }, {}});
    p.add({"--revision", {}, "REV", "Hub revision (branch, tag or commit).", "model",
           [&a](const std::string& v) { a.model.revision = v; }, [&a] { return a.model.revision; }, {}});
  }
  p.add({"--dtype", {}, "D", "Model compute dtype: auto, bfloat16, float16 (half), float32 (float). auto = the "
         "checkpoint's bfloat16/float16, else bfloat16.", "model",
         [&a](const std::string& v) { a.model.dtype = v; },  // checked with the other values (§9.7)
         [&a] { return a.model.dtype; }, {}});
  if (full) {
    p.add({"--load-format", {}, "F", "auto, safetensors, gguf, or dummy (random weights of the config's shapes).", "model",
           [&a](const std::string& v) {
             check_choice("--load-format", v, {"auto", "safetensors", "gguf", "dummy"});
             a.model.load_format = v;
           },
           [&a] { return a.model.load_format; }, {}});
    p.add({"--max-model-len", {}, "N", "Maximum context length (prompt + output); default: the model's.", "model",
           [&a](const std::string& v) { a.model.max_model_len = parse_int_arg("--max-model-len", v, kMaxModelLen, kMaxModelLenWhat); },
           [&a] { return show_opt_int(a.model.max_model_len); }, {}});
    p.add({"--seed", {}, "N", "Random seed for sampling and dummy weights.", "model",
           [&a](const std::string& v) { a.model.seed = parse_int_arg("--seed", v); },
           [&a] { return std::to_string(a.model.seed); }, {}});
  }
  // ---- cache ----
  p.add({"--block-size", {}, "N", "KV cache block size in tokens (default: 16 on CUDA, 128 on CPU). Giving it "
         "makes it a backend-selection input.", "cache",
         [&a](const std::string& v) { a.cache.block_size = parse_int_arg("--block-size", v, kMaxBlockSize, kMaxBlockSizeWhat); },
         [&a] { return show_opt_int(a.cache.block_size); }, {}});
  p.add({"--kv-cache-dtype", {}, "D", "KV cache dtype: auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, "
         "turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc.", "cache",
         [&a](const std::string& v) { a.cache.kv_cache_dtype = v; }, [&a] { return a.cache.kv_cache_dtype; }, {}});
  p.add({"--kv-cache-dtype-skip-layers", {}, "LAYERS", "Layers whose KV cache stays unquantized (auto) under a "
         "quantized --kv-cache-dtype (fp8, fp8_e4m3, fp8_e5m2, turboquant_*): layer indices and/or sliding_window "
         "(every sliding-window layer), comma-separated. TurboQuant's boundary layers (the first and last two) "
         "keep an unquantized cache anyway.", "cache",
         [&a](const std::string& v) { a.cache.kv_cache_dtype_skip_layers = parse_kv_cache_dtype_skip_layers(v); },
         [&a] { return join(a.cache.kv_cache_dtype_skip_layers, ","); }, {}, /*list=*/true});
  if (full) {
    p.add({"--gpu-memory-utilization", {}, "F", "Fraction of GPU memory for weights, activations and KV cache.",
           "cache", [&a](const std::string& v) { a.cache.gpu_memory_utilization = parse_float_arg("--gpu-memory-utilization", v); },
           [&a] { return show_double(a.cache.gpu_memory_utilization); }, {}});
    p.add({"--kv-cache-space", {}, "GIB", "CPU: GiB of memory for the KV cache.", "cache",
           [&a](const std::string& v) { a.cache.kv_cache_space_gib = parse_float_arg("--kv-cache-space", v); },
           [&a] { return show_double(a.cache.kv_cache_space_gib); }, {}});
    p.add({"--enable-prefix-caching", {}, "", "Share KV blocks between requests with a common prompt prefix.", "cache",
           [&a](const std::string&) { a.cache.enable_prefix_caching = true; },
           [&a] { return show_bool(a.cache.enable_prefix_caching); },
           [&a] { a.cache.enable_prefix_caching = false; }});
    p.add({"--num-gpu-blocks-override", {}, "N", "Use this many KV cache blocks instead of sizing from memory.", "cache",
           [&a](const std::string& v) { a.cache.num_gpu_blocks_override = parse_int_arg("--num-gpu-blocks-override", v); },
           [&a] { return show_opt_int(a.cache.num_gpu_blocks_override); }, {}});
    // ---- scheduler ----
    p.add({"--max-num-seqs", {}, "N", "Maximum number of sequences per step.", "scheduler",
           [&a](const std::string& v) { a.scheduler.max_num_seqs = parse_int_arg("--max-num-seqs", v, kMaxNumSeqs, kMaxNumSeqsWhat); },
           [&a] { return std::to_string(a.scheduler.max_num_seqs); }, {}});
    p.add({"--max-num-batched-tokens", {}, "N", "Token budget per step (default: 8192, at least max-model-len "
           "without chunked prefill).", "scheduler",
           [&a](const std::string& v) { a.scheduler.max_num_batched_tokens = parse_int_arg("--max-num-batched-tokens", v, kMaxNumBatchedTokens, kMaxNumBatchedTokensWhat); },
           [&a] { return show_opt_int(a.scheduler.max_num_batched_tokens); }, {}});
    p.add({"--enable-chunked-prefill", {}, "", "Split long prompts into chunks mixed with decodes.", "scheduler",
           [&a](const std::string&) { a.scheduler.enable_chunked_prefill = true; },
           [&a] { return show_bool(a.scheduler.enable_chunked_prefill); },
           [&a] { a.scheduler.enable_chunked_prefill = false; }});
  }
  // ---- attention ----
  p.add({"--attention-backend", {}, "NAME", "Force an attention backend (FLASH_ATTN, FLASHINFER, TRITON_ATTN, "
         "FLEX_ATTENTION, TURBOQUANT, CPU_ATTN) or auto.", "attention",
         [&a](const std::string& v) { a.attention.attention_backend = v; },
         [&a] { return a.attention.attention_backend.value_or("None"); }, {}});
  p.add({"--attention-config", {"-ac"}, "JSON", "AttentionConfig as JSON, or one field at a time with "
         "--attention-config.FIELD VALUE / -ac.FIELD VALUE.", "attention",
         [&a](const std::string& v) { a.attention.attention_config = v; },
         [&a] { return a.attention.attention_config.value_or("{}"); }, {}});
  p.add({"--batch-invariant", {}, "", "Batch-invariant kernels (same as PAGODA_BATCH_INVARIANT=1).", "attention",
         [&a](const std::string&) { a.attention.batch_invariant = true; },
         [&a] { return show_bool(a.attention.batch_invariant); }, {}});
  // ---- device ----
  if (full) {
    p.add({"--device", {}, "D", "auto (CUDA when present, else CPU), cuda or cpu.", "device",
           [&a](const std::string& v) {
             check_choice("--device", v, {"auto", "cuda", "cpu"});
             a.device.device = v;
           },
           [&a] { return a.device.device; }, {}});
    p.add({"--cpu-threads", {}, "N", "CPU: threads of the forward pass, the calling one included (0 = one per "
           "hardware thread).", "device",
           [&a](const std::string& v) {
             a.device.cpu_threads = parse_int_arg("--cpu-threads", v, 4096, "threads");
             if (a.device.cpu_threads < 0) throw_config_error("--cpu-threads must be >= 0, got ", a.device.cpu_threads);
           },
           [&a] { return std::to_string(a.device.cpu_threads); }, {}});
    p.add({"--enforce-eager", {}, "", "Run decode steps eagerly (no CUDA graphs).", "device",
           [&a](const std::string&) { a.device.enforce_eager = true; }, [&a] { return show_bool(a.device.enforce_eager); }, {}});
  }
  p.add({"--log-level", {}, "LEVEL", "DEBUG, INFO, WARNING or ERROR (default: PAGODA_LOGGING_LEVEL or INFO).", "device",
         [&a](const std::string& v) {
           check_choice("--log-level", to_upper(v), {"DEBUG", "INFO", "WARNING", "ERROR"});
           a.device.log_level = to_upper(v);
         },
         [&a] { return a.device.log_level.empty() ? "INFO" : a.device.log_level; }, {}});
  // ---- server ----
  if (set == EngineOptionSet::kServe) {
    p.add({"--host", {}, "HOST", "Address to listen on.", "server",
           [&a](const std::string& v) { a.server.host = v; }, [&a] { return a.server.host; }, {}});
    p.add({"--port", {}, "PORT", "Port to listen on.", "server",
           [&a](const std::string& v) { a.server.port = parse_int_arg("--port", v); },
           [&a] { return std::to_string(a.server.port); }, {}});
    p.add({"--api-key", {}, "KEY", "Require `Authorization: Bearer KEY` on /v1 requests.", "server",
           [&a](const std::string& v) { a.server.api_key = v; }, [&a] { return a.server.api_key.empty() ? "None" : "***"; }, {}});
    p.add({"--served-model-name", {}, "NAME", "Model name(s) the API reports, comma-separated (default: --model).",
           "server", [&a](const std::string& v) { a.server.served_model_name = split(v, ','); },
           [&a] { return join(a.server.served_model_name, ","); }, {}});
    auto seconds = [&p](const char* flag, const char* help, double& field) {
      p.add({flag, {}, "SECONDS", help, "server",
             [&field, flag](const std::string& v) {
               field = parse_float_arg(flag, v);
               if (!(field >= 0 && field <= 86400)) throw_config_error(flag, " must be between 0 and 86400 seconds, got ", v);
             },
             [&field] { return show_double(field); }, {}});
    };
    auto count = [&p](const char* flag, const char* meta, const char* help, int& field) {
      p.add({flag, {}, meta, help, "server",
             [&field, flag](const std::string& v) {
               field = parse_int_arg(flag, v);
               if (field < 1) throw_config_error(flag, " must be at least 1, got ", v);
             },
             [&field] { return std::to_string(field); }, {}});
    };
    seconds("--shutdown-timeout", "On SIGTERM/SIGINT, let requests in flight run this long before aborting them "
            "(0: abort at once). Aborted requests still get a complete response with finish_reason \"abort\"; a "
            "second signal exits at once.", a.server.shutdown_timeout_s);
    seconds("--timeout-keep-alive", "Close a kept-alive connection idle this long.", a.server.timeout_keep_alive_s);
    seconds("--http-request-timeout", "A request's headers and body must arrive within this time of its first "
            "byte (else 408).", a.server.http_request_timeout_s);
    count("--h11-max-incomplete-event-size", "BYTES", "Largest request line + headers (else 431).",
          a.server.h11_max_incomplete_event_size);
    count("--h11-max-header-count", "N", "Most header fields in a request (else 431).", a.server.h11_max_header_count);
    count("--max-request-body-bytes", "BYTES", "Largest request body (else 413).", a.server.max_request_body_bytes);
    count("--max-connections", "N", "Open connections at most (beyond: 503).", a.server.max_connections);
    p.add({"--max-logprobs", {}, "N", "Most logprobs / top_logprobs a request may ask for (else 400).", "server",
           [&a](const std::string& v) {
             a.server.max_logprobs = parse_int_arg("--max-logprobs", v);
             if (a.server.max_logprobs < 0) throw_config_error("--max-logprobs must be >= 0, got ", v);
           },
           [&a] { return std::to_string(a.server.max_logprobs); }, {}});
    count("--max-concurrent-requests", "N", "HTTP requests handled at once, streams included (beyond: 503).",
          a.server.max_concurrent_requests);
  }
}

ValidatedArgs validate_engine_args(const EngineArgs& a) {
  ValidatedArgs v;
  // 1. AttentionConfig validation.
  if (a.attention.attention_config) v.attention_config = parse_attention_config_json(*a.attention.attention_config);
  // 2. Other option values.
  const auto& kv = a.cache.kv_cache_dtype;
  bool kv_ok = false;
  for (const auto& c : kv_cache_dtype_choices()) kv_ok = kv_ok || c == kv;
  if (!kv_ok)
    throw_config_error("Invalid kv_cache_dtype: ", kv, ". Valid values are: ('auto', 'float16', 'bfloat16', 'fp8', "
                       "'fp8_e4m3', 'fp8_e5m2', 'turboquant_k8v4', 'turboquant_4bit_nc', 'turboquant_k3v4_nc', "
                       "'turboquant_3bit_nc')");
  v.kv_cache_dtype = kv;
  const auto& d = a.model.dtype;
  if (d == "auto") v.dtype = DTypeChoice::kAuto;
  else if (d == "bfloat16") v.dtype = DTypeChoice::kBFloat16;
  else if (d == "float16" || d == "half") v.dtype = DTypeChoice::kFloat16;
  else if (d == "float32" || d == "float") v.dtype = DTypeChoice::kFloat32;
  else throw_config_error("Invalid dtype: ", d, ". Valid values are: auto, bfloat16, float16, half, float32, float");
  if (a.cache.block_size && *a.cache.block_size <= 0)
    throw_config_error("Invalid block_size: ", *a.cache.block_size, ". It must be a positive integer.");
  v.block_size = a.cache.block_size;
  check_sizes(a);
  // 3. Environment variables.
  v.env = read_env_settings();
  v.batch_invariant = a.attention.batch_invariant || v.env.batch_invariant;
  // 4. Mutual exclusion, 5. the --attention-backend name.
  const auto& raw = a.attention.attention_backend;
  bool backend_given = raw && !raw->empty() && *raw != "None";
  if (backend_given && v.attention_config.backend)
    throw_config_error("attention_backend and attention_config.backend are mutually exclusive");
  if (backend_given) v.attention_config.backend = parse_backend_name(*raw, true);
  return v;
}

std::vector<std::string> parse_kv_cache_dtype_skip_layers(const std::string& value) {
  std::vector<std::string> items;
  for (const std::string& raw : split(value, ',')) {
    const std::string item(trim(raw));
    if (item.empty()) continue;
    const bool index = item.find_first_not_of("0123456789") == std::string::npos;
    if (item != "sliding_window" && !index)
      throw_config_error("argument --kv-cache-dtype-skip-layers: invalid item '", text_preview(item),
                         "' (expected layer indices and/or sliding_window, comma-separated)");
    items.push_back(index ? std::to_string(parse_int_arg("--kv-cache-dtype-skip-layers", item)) : item);
  }
  return items;
}

DType resolve_model_dtype(DTypeChoice choice, std::optional<DType> checkpoint, bool cuda_below_sm80) {
  switch (choice) {
    case DTypeChoice::kBFloat16: return DType::kBF16;
    case DTypeChoice::kFloat16: return DType::kF16;
    case DTypeChoice::kFloat32: return DType::kF32;
    case DTypeChoice::kAuto: {
      DType t = (checkpoint == DType::kBF16 || checkpoint == DType::kF16) ? *checkpoint : DType::kBF16;
      if (t == DType::kBF16 && cuda_below_sm80) t = DType::kF16;
      return t;
    }
  }
  return DType::kBF16;
}

}  // namespace pagoda
