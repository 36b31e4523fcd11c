#include "pagoda/engine/model_setup.h"

#include "pagoda/engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/hub/hub.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/model/gguf_model.h"
#include "pagoda/model/kv_cache_sizing.h"
#include "pagoda/tokenizer/gguf_vocab.h"
#ifdef PAGODA_WITH_CUDA_MODEL
#include "pagoda/model/cuda/cuda_model_runner.h"
#endif

namespace pagoda {
namespace {

namespace fs = std::filesystem;

#ifdef PAGODA_WITH_CUDA_MODEL
constexpr bool kCudaModelBuilt = true;
#else
constexpr bool kCudaModelBuilt = false;
#endif

}  // namespace

DeviceInfo pick_engine_device(const std::string& choice) {
  if (choice == "cpu") return cpu_device();
  auto cuda = detect_cuda_device();
  if (choice == "cuda") {
    if (!cuda) throw_runtime_error("--device cuda: no CUDA device was found (", cuda_runtime_built() ? "the CUDA runtime reports none" : "this binary was built without CUDA", "). Use --device cpu.");
    if (!kCudaModelBuilt) throw_runtime_error("--device cuda: found ", cuda->name, ", but this binary was built without the CUDA model path; run with --device cpu.");
    return *cuda;
  }
  if (cuda && kCudaModelBuilt) return *cuda;
  return cpu_device();
}

namespace {

// The model's folder or GGUF file; "" for the random-weight built-ins.
std::string resolve_model_dir(const EngineArgs& args) {
  const std::string& m = args.model.model;
  if (builtin_model_config(m)) return "";
  if (is_builtin_real_model(m)) return builtin_model_file(m).string();
  if (fs::is_directory(m)) return m;
  if (is_gguf_path(m)) return m;
  if (fs::exists(m))
    throw_config_error("--model ", m, " is a file but not a GGUF file; give a GGUF file or the model's folder (with config.json)");
  HubOptions hub;
  hub.revision = args.model.revision;
  return resolve_model(m, hub);
}

// --tokenizer: a folder (or tokenizer.json) as given, else a hub repo id resolved like --model.
std::string resolve_tokenizer_dir(const EngineArgs& args) {
  const std::string& t = args.model.tokenizer;
  if (fs::exists(t)) return t;
  HubOptions hub;
  hub.revision = args.model.revision;
  return resolve_model(t, hub);
}

}  // namespace

Tokenizer dummy_tiny_tokenizer() {
  // GPT-2's byte-to-unicode map, so the tokenizer is an ordinary byte-level BPE with no merges.
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) s += char(cp);
    else if (cp < 0x800) { s += char(0xC0 | (cp >> 6)); s += char(0x80 | (cp & 0x3F)); }
    else { s += char(0xE0 | (cp >> 12)); s += char(0x80 | ((cp >> 6) & 0x3F)); s += char(0x80 | (cp & 0x3F)); }
    return s;
  };
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  const char* specials[3] = {"<pad>", "<s>", "</s>"};
  for (int i = 0; i < 3; ++i) {
    vocab[specials[i]] = i;
    added.push_back({{"id", i}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  for (size_t i = 0; i < bs.size(); ++i) vocab[utf8(cs[i])] = 3 + bs[i];
  for (int id = 259; id < 512; ++id) {
    std::string t = "<|extra_" + std::to_string(id) + "|>";
    vocab[t] = id;
    added.push_back({{"id", id}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                 {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},
                 {"merges", nlohmann::ordered_json::array()}}}};
  fs::path dir = fs::temp_directory_path() / ("pagoda-dummy-tiny-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})";
  Tokenizer t = Tokenizer::from_file(dir / "tokenizer.json");
  std::error_code ec;
  fs::remove_all(dir, ec);
  return t;
}

ModelConfig read_engine_model_config(const EngineArgs& args) {
  const std::string dir = resolve_model_dir(args);
  if (dir.empty()) return *builtin_model_config(args.model.model);
  return is_gguf_path(dir) ? gguf_model_config(*GgufFile::open(dir)) : parse_model_config(dir);
}

EngineAttentionSelection select_engine_attention(const ResolvedAttentionSettings& s, const EngineArgs& args,
                                                 const ModelConfig& cfg, DType model_dtype, const DeviceInfo& device) {
  EngineAttentionSelection a;
  a.kv_cache_dtype = effective_kv_cache_dtype(s.kv_cache_dtype, cfg.has_kv_cache_scheme);
  a.layer_sliding.resize(size_t(cfg.num_layers));
  for (int l = 0; l < cfg.num_layers; ++l)
    a.layer_sliding[size_t(l)] = size_t(l) < cfg.layer_uses_sliding_window.size() && cfg.layer_uses_sliding_window[size_t(l)];
  a.layer_kv_cache_dtypes =
      layer_kv_cache_dtypes(a.kv_cache_dtype, cfg.num_layers, a.layer_sliding, args.cache.kv_cache_dtype_skip_layers);
  for (int l = 0; l < cfg.num_layers; ++l) {
    SelectorConfig c;
    c.head_size = cfg.head_dim;
    c.dtype = model_dtype;
    c.kv_cache_dtype = a.layer_kv_cache_dtypes[size_t(l)];
    c.block_size = s.user_block_size;
    c.use_per_head_quant_scales = cfg.kv_cache_scheme_strategy.value_or("") == "attn_head";
    c.has_sliding_window = a.layer_sliding[size_t(l)];
    c.use_non_causal = s.attention.use_non_causal;
    c.use_batch_invariant = s.batch_invariant;
    a.layers.push_back(c);
  }
  BackendRegistry registry = BackendRegistry::builtin(false);
  SelectionTarget target{device.kind, device.cc.value_or(ComputeCapability{0, 0}), device.name};
  AttentionSelector selector(registry, target, s.attention, s.batch_invariant, s.env_layout);
  a.selection = select_attention(selector, a.layers, s.user_block_size);
  return a;
}

EngineSetup setup_engine(const EngineArgs& args, const ValidatedArgs& v, const LoadedModel* shared_model) {
  EngineSetup e;
  e.device = pick_engine_device(args.device.device);
  e.model_name = args.model.model;
  e.model_dir = resolve_model_dir(args);
  const bool dummy_model = e.model_dir.empty();
  const bool gguf_model = !dummy_model && is_gguf_path(e.model_dir);
  ModelConfig cfg = dummy_model  ? *builtin_model_config(e.model_name)
                    : gguf_model ? gguf_model_config(*GgufFile::open(e.model_dir))
                                 : parse_model_config(e.model_dir);

  // Model dtype (§9.3); on the CPU compute is float32 whatever it is: it sets the KV cache `auto` dtype and,
  // when given explicitly, the weight storage.
  const bool cuda = e.device.kind == DeviceKind::kCuda;
  if (cuda && args.device.cpu_threads != 0)
    throw_config_error("--cpu-threads sets the CPU forward pass's threads, but the model runs on ", describe(e.device),
                       "; drop it or add --device cpu");
  e.model_dtype = resolve_model_dtype(v.dtype, cfg.checkpoint_dtype, cuda && *e.device.cc < ComputeCapability{8, 0});
  e.max_model_len = args.model.max_model_len.value_or(cfg.max_position_embeddings);
  if (e.max_model_len <= 0 || e.max_model_len > kMaxModelLen)
    throw_config_error("--max-model-len must be between 1 and ", kMaxModelLen, ", got ", e.max_model_len);
  if (e.max_model_len > cfg.max_position_embeddings)
    PAGODA_LOG_WARNING("--max-model-len ", e.max_model_len, " exceeds the model's max_position_embeddings ",
                       cfg.max_position_embeddings, "; positions beyond it are extrapolated.");

  ResolvedAttentionSettings s = resolve_attention_settings(v, e.device.kind);
  e.kv_cache_dtype = effective_kv_cache_dtype(s.kv_cache_dtype, cfg.has_kv_cache_scheme);
  PAGODA_LOG_INFO("Initializing engine: model=", dummy_model ? e.model_name : e.model_dir,
                  ", architecture=", cfg.architecture_name, ", dtype=", dtype_name(e.model_dtype),
                  ", max_model_len=", e.max_model_len, ", kv_cache_dtype=", e.kv_cache_dtype,
                  ", device=", describe(e.device));

  EngineAttentionSelection attn = select_engine_attention(s, args, cfg, e.model_dtype, e.device);
  e.layer_kv_cache_dtypes = attn.layer_kv_cache_dtypes;
  e.layer_backends = attn.selection.per_layer;
  e.attention = attn.selection.plan;
  BackendRegistry registry = BackendRegistry::builtin(false);

  LoadOptions lo;
  lo.load_format = parse_load_format(args.model.load_format);
  if (v.dtype != DTypeChoice::kAuto || cuda) lo.dtype = e.model_dtype;
  lo.seed = uint64_t(args.model.seed);
  lo.kv_cache_fp8 = starts_with(e.kv_cache_dtype, "fp8");  // the checkpoint's scales, for the fp8 layers
  lo.defer_random_weights = cuda && (dummy_model || lo.load_format == LoadFormat::kDummy);
  e.model = shared_model ? *shared_model : load_model(dummy_model ? e.model_name : e.model_dir, lo);

  // The runners of the layer groups: each layer's selected backend over its shape and its own cache format.
  std::vector<std::shared_ptr<const AttentionBackend>> backends;
  for (BackendName b : e.layer_backends) backends.push_back(registry.shared(b));
  RunnerOptions ro;
  ro.batch_invariant = s.batch_invariant;
  ro.flash_attn_version = e.attention.flash_attn_version.value_or(2);
  ro.use_prefill_decode_attention = s.attention.use_prefill_decode_attention;
  ro.max_graph_splits = s.attention.flash_attn_max_num_splits_for_cuda_graph;
  ro.tq_max_graph_splits = s.attention.tq_max_kv_splits_for_cuda_graph;
  ro.flex_block_m = s.attention.flex_attn_block_m.value_or(0);
  ro.flex_block_n = s.attention.flex_attn_block_n.value_or(0);
  ro.cascade = s.attention.use_cascade_attention;
  // FP8 queries over e4m3 KV on SM 8.9+ (spec §6.5); the CPU runner's queries are float32 whatever this says.
  ro.flashinfer_q_quantization = !s.attention.disable_flashinfer_q_quantization;
  const bool causal = !s.attention.use_non_causal;
  // fp8 layers read the checkpoint's scales; the others ignore them.
  const bool fp8_layers = std::any_of(e.layer_kv_cache_dtypes.begin(), e.layer_kv_cache_dtypes.end(),
                                      [](const std::string& kv) { return starts_with(kv, "fp8"); });
  if (cuda) {
#ifdef PAGODA_WITH_CUDA_MODEL
    if (!(args.cache.gpu_memory_utilization > 0) || args.cache.gpu_memory_utilization > 1)
      throw_config_error("--gpu-memory-utilization must be in (0, 1], got ", args.cache.gpu_memory_utilization);
    CudaRunnerOptions co;
    co.attention = group_attention_layers(cfg, backends, e.model_dtype, e.layer_kv_cache_dtypes, e.model_dtype,
                                          e.attention.kv_layout, e.attention.block_size, causal, ro);
    e.kv_bytes_per_block = kv_block_bytes(co.attention);
    co.dtype = e.model_dtype;
    // The element type of the layers not in packed TurboQuant slots (the model dtype if there are none).
    co.kv_dtype = e.model_dtype;
    for (const AttentionGroup& g : co.attention) {
      if (!g.shape.kv_preset.empty()) continue;
      co.kv_dtype = g.shape.kv_dtype;
      break;
    }
    if (fp8_layers) co.layer_kv_scales = e.model.kv_scales;
    co.block_size = e.attention.block_size;
    co.layout = e.attention.kv_layout;
    co.gpu_memory_utilization = args.cache.gpu_memory_utilization;
    co.num_blocks_override = args.cache.num_gpu_blocks_override;
    co.max_num_tokens = engine_options_from_args(args, e.max_model_len).max_num_batched_tokens;
    co.max_num_seqs = args.scheduler.max_num_seqs;
    co.max_model_len = e.max_model_len;
    co.enforce_eager = args.device.enforce_eager;
    co.batch_invariant = s.batch_invariant;
    auto runner = std::make_unique<CudaModelRunner>(e.model, co);
    PAGODA_LOG_INFO("GPU memory: weights ", format_bytes(double(runner->weight_bytes())), ", KV cache ",
                    kv_cache_summary(co.attention, runner->cache_options().num_blocks, co.block_size,
                                     double(runner->kv_cache_bytes()), e.kv_cache_dtype));
    runner->capture_decode_graphs();  // before any request, so that no step pays for a capture
    e.runner = std::move(runner);
#endif
  } else {
    KvCacheOptions kv;
    kv.block_size = e.attention.block_size;
    if (fp8_layers) kv.layer_scales = e.model.kv_scales;
    if (!args.cache.num_gpu_blocks_override && !(args.cache.kv_cache_space_gib > 0))
      throw_config_error("--kv-cache-space must be positive, got ", args.cache.kv_cache_space_gib);
    // Compute is float32 on the CPU; each layer's cache is in its own format (`auto` = the model dtype).
    auto groups = group_attention_layers(cfg, backends, DType::kF32, e.layer_kv_cache_dtypes, e.model_dtype,
                                         e.attention.kv_layout, e.attention.block_size, causal, ro);
    e.kv_bytes_per_block = kv_block_bytes(groups);
    KvCacheSizing sizing;
    sizing.bytes_per_block = double(e.kv_bytes_per_block);
    sizing.budget_bytes = args.cache.kv_cache_space_gib * double(1ull << 30);
    sizing.budget_hint = "raise --kv-cache-space";
    sizing.num_blocks_override = args.cache.num_gpu_blocks_override;
    sizing.max_useful_blocks = max_useful_kv_blocks(args.scheduler.max_num_seqs, e.max_model_len, kv.block_size);
    kv.num_blocks = kv_cache_blocks(sizing);
    // The cache is zeroed lazily (calloc), so an oversized one would fail at first use, not here.
    const double kv_bytes = sizing.bytes_per_block * double(kv.num_blocks);
    if (e.device.total_memory > 0 && kv_bytes > double(e.device.total_memory))
      throw_config_error("the CPU KV cache of ", kv.num_blocks, " blocks of ", kv.block_size, " tokens needs ", format_bytes(kv_bytes),
                         ", more than this machine's ", format_bytes(double(e.device.total_memory)),
                         "; lower --num-gpu-blocks-override or --kv-cache-space");
    PAGODA_LOG_INFO("CPU KV cache: ", kv_cache_summary(groups, kv.num_blocks, kv.block_size, kv_bytes, e.kv_cache_dtype));
    e.runner = std::make_unique<CpuModelRunner>(e.model, kv, std::move(groups), args.device.cpu_threads);
  }

  std::string tok_dir = args.model.tokenizer.empty() ? e.model_dir : resolve_tokenizer_dir(args);
  if (args.model.tokenizer.empty() && gguf_model) {
    if (e.model.gguf_vocab)
      e.tokenizer = tokenizer_from_gguf_vocab(*e.model.gguf_vocab);
    else
      PAGODA_LOG_WARNING("The GGUF file ", e.model_dir, " has no tokenizer (no tokenizer.ggml.tokens): prompts must be "
                         "given as token ids and output is printed as ids; --tokenizer names one.");
  } else if (!tok_dir.empty()) {
    if (fs::exists(fs::path(tok_dir) / "tokenizer.json") || fs::path(tok_dir).extension() == ".json")
      e.tokenizer = Tokenizer::from_file(tok_dir);
    else if (!args.model.tokenizer.empty())
      throw_config_error("--tokenizer ", args.model.tokenizer, ": no tokenizer.json in ", tok_dir);
    else
      PAGODA_LOG_WARNING("No tokenizer.json in ", tok_dir, ": prompts must be given as token ids and output is printed as ids.");
  } else if (e.model_name == kDummyTinyModel) {
    e.tokenizer = dummy_tiny_tokenizer();
  }
  return e;
}

}  // namespace pagoda
