// `pagoda backends list` and `pagoda backends select` (spec §11): what pagoda would choose and why.
#include <cstdio>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "pagoda/attention/registry.h"
#include "pagoda/attention/startup.h"
#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/model/gguf_model.h"
#include "pagoda/model/load_model.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

// What the explain command reads from --model (§11: head size, dtype, layer 0's sliding window,
// kv_cache_scheme; for the KV cache capacity also the layers).
struct ModelFacts {
  int head_size = 0;
  std::optional<DType> checkpoint_dtype;
  bool layer0_sliding = false;
  bool has_kv_cache_scheme = false;
  bool per_head_quant_scales = false;
  int num_layers = 0;               // 0: not known (a config.json without num_hidden_layers)
  int num_kv_heads = 0;
  std::vector<bool> layer_sliding;  // [num_layers]
};

// A built-in name's config or a GGUF file's header (never weights), as engine start reads them.
ModelFacts facts_of(const ModelConfig& c) {
  ModelFacts f;
  f.head_size = c.head_dim;
  f.checkpoint_dtype = c.checkpoint_dtype;
  f.has_kv_cache_scheme = c.has_kv_cache_scheme;
  f.per_head_quant_scales = c.kv_cache_scheme_strategy.value_or("") == "attn_head";
  f.num_layers = c.num_layers;
  f.num_kv_heads = c.num_kv_heads;
  for (int l = 0; l < c.num_layers; ++l)
    f.layer_sliding.push_back(size_t(l) < c.layer_uses_sliding_window.size() && c.layer_uses_sliding_window[size_t(l)]);
  f.layer0_sliding = !f.layer_sliding.empty() && f.layer_sliding.front();
  return f;
}

ModelFacts read_config_json(const std::string& dir) {
  std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in)
    throw_config_error("Cannot read ", path, ": --model must be a local model folder with a config.json, a GGUF file "
                       "or a built-in name (", kDefaultModel, ", ", kDummyTinyModel, ", ", kDummyLlama3_8B, ", ...)");
  Json j;
  try {
    j = Json::parse(in);
  } catch (const std::exception& e) {
    throw_config_error("Malformed JSON in ", path, ": ", e.what());
  }
  auto get_int = [&](const char* k) -> std::optional<long long> {
    if (j.contains(k) && j[k].is_number_integer()) return j[k].get<long long>();
    return std::nullopt;
  };
  ModelFacts f;
  if (auto hd = get_int("head_dim")) {
    f.head_size = int(*hd);
  } else {
    auto hidden = get_int("hidden_size");
    auto heads = get_int("num_attention_heads");
    if (!hidden || !heads || *heads <= 0)
      throw_config_error(path, " has neither head_dim nor hidden_size and num_attention_heads");
    f.head_size = int(*hidden / *heads);
  }
  for (const char* k : {"torch_dtype", "dtype"}) {
    if (j.contains(k) && j[k].is_string()) {
      f.checkpoint_dtype = dtype_from_name(j[k].get<std::string>());
      break;
    }
  }
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  bool has_window = j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
                    j["sliding_window"].get<long long>() > 0;
  auto sliding = [&](int l) {
    if (j.contains("layer_types") && j["layer_types"].is_array() && !j["layer_types"].empty())
      return size_t(l) < j["layer_types"].size() && j["layer_types"][size_t(l)] == "sliding_attention";
    if (arch == "MistralForCausalLM") return has_window;
    if (j.value("use_sliding_window", false) && has_window) return l >= get_int("max_window_layers").value_or(0);
    return false;
  };
  f.layer0_sliding = sliding(0);
  // The layers, for the capacity only: a config.json without them still explains the selection.
  const auto layers = get_int("num_hidden_layers");
  const auto kv_heads = get_int("num_key_value_heads") ? get_int("num_key_value_heads") : get_int("num_attention_heads");
  if (layers && *layers > 0 && *layers <= kMaxNumLayers && kv_heads && *kv_heads > 0 && *kv_heads <= kMaxNumHeads) {
    f.num_layers = int(*layers);
    f.num_kv_heads = int(*kv_heads);
    for (int l = 0; l < f.num_layers; ++l) f.layer_sliding.push_back(sliding(l));
  }
  if (j.contains("quantization_config") && j["quantization_config"].is_object()) {
    const auto& q = j["quantization_config"];
    if (q.contains("kv_cache_scheme") && q["kv_cache_scheme"].is_object()) {
      f.has_kv_cache_scheme = true;
      f.per_head_quant_scales = q["kv_cache_scheme"].value("strategy", "") == "attn_head";
    }
  }
  return f;
}

ModelFacts read_model_facts(const std::string& model) {
  if (auto c = builtin_model_config(model)) return facts_of(*c);
  if (is_builtin_real_model(model)) return facts_of(gguf_model_config(*GgufFile::open(builtin_model_file(model).string())));
  if (is_gguf_path(model)) return facts_of(gguf_model_config(*GgufFile::open(model)));
  return read_config_json(model);
}

// What a KV cache of the layer's dtype holds (spec §10): bytes per (token, KV head) against bfloat16's 4 x head
// size, and with --model the same over every layer (TurboQuant boundary and skipped layers at `auto`).
struct KvCapacity {
  std::string kv_cache_dtype;
  int64_t bytes_per_token_head = 0;
  int64_t bfloat16_bytes_per_token_head = 0;
  struct Model {
    int num_layers = 0, quantized_layers = 0;
    int64_t bytes_per_token = 0, bfloat16_bytes_per_token = 0;  // every layer's K and V of every KV head
  };
  std::optional<Model> model;
};

KvCapacity kv_capacity(const AttentionBackend& backend, const SelectorConfig& cfg, int block_size, KvLayout layout,
                       const std::optional<ModelFacts>& facts, const std::vector<std::string>& skip_layers) {
  KvCapacity c;
  c.kv_cache_dtype = cfg.kv_cache_dtype;
  KvCacheShape shape = backend.kv_cache_shape(1, block_size, 1, cfg.head_size, cfg.kv_cache_dtype, cfg.dtype, layout);
  int64_t bytes = shape.element_bytes;
  for (int64_t d : shape.physical) bytes *= d;
  c.bytes_per_token_head = bytes / block_size;
  c.bfloat16_bytes_per_token_head = 2 * int64_t(cfg.head_size) * 2;
  if (!facts || facts->num_layers == 0) return c;
  KvCapacity::Model m;
  m.num_layers = facts->num_layers;
  const auto kv = layer_kv_cache_dtypes(cfg.kv_cache_dtype, facts->num_layers, facts->layer_sliding, skip_layers);
  for (const std::string& layer_kv : kv) {
    const bool same = layer_kv == cfg.kv_cache_dtype;
    m.quantized_layers += same && is_quantized_kv_dtype(layer_kv);
    const int64_t per_head =
        same ? c.bytes_per_token_head
             : 2 * int64_t(cfg.head_size) * int64_t(dtype_size(kv_cache_element_dtype(layer_kv, cfg.dtype)));
    m.bytes_per_token += per_head * facts->num_kv_heads;
    m.bfloat16_bytes_per_token += c.bfloat16_bytes_per_token_head * facts->num_kv_heads;
  }
  c.model = m;
  return c;
}

double ratio(int64_t bfloat16_bytes, int64_t bytes) { return double(bfloat16_bytes) / double(bytes); }

struct ExplainOptions {
  std::optional<int> head_size;
  std::string device = "cuda";
  std::optional<std::string> device_capability;
  std::optional<int> sliding_window;
  bool sinks = false;
  std::string attn_type = "decoder";
  bool json = false;
};

struct ExplainResult {
  std::string device = "cuda";
  std::optional<ComputeCapability> cc = ComputeCapability{9, 0};
  std::optional<BackendName> selected;
  SelectionTrace trace;
  std::optional<std::string> error;
  std::optional<int> fa_version;
  KvLayout layout = KvLayout::kNHD;
  int block_size = 16;
  int exit_code = 0;
  std::optional<SelectorConfig> cfg;
  std::vector<std::pair<BackendName, std::vector<std::string>>> table;  // every candidate
  std::optional<KvCapacity> capacity;  // once a backend was selected
};

Json to_json(const ExplainResult& r, const std::vector<LogRecord>& log) {
  Json j;
  j["device"] = r.device;
  j["device_capability"] = r.cc ? Json(r.cc->str()) : Json(nullptr);
  j["selected"] = r.selected ? Json(std::string(backend_name_str(*r.selected))) : Json(nullptr);
  Json potential = Json::array();
  for (BackendName b : r.trace.potential) potential.push_back(std::string(backend_name_str(b)));
  j["potential"] = potential;
  Json rejected = Json::object();
  for (const auto& [b, reasons] : r.trace.rejected) rejected[std::string(backend_name_str(b))] = reasons;
  j["rejected"] = rejected;
  j["error"] = r.error ? Json(*r.error) : Json(nullptr);
  j["flash_attn_version"] = r.fa_version ? Json(*r.fa_version) : Json(nullptr);
  j["kv_cache_layout"] = kv_layout_str(r.layout);
  j["block_size"] = r.block_size;
  Json lines = Json::array();
  for (const auto& rec : log) lines.push_back({{"level", std::string(log_level_name(rec.level))}, {"message", rec.message}});
  j["log"] = lines;
  // pagoda's addition to §11's object, after its fields: what the selected layer's cache holds.
  Json cap = nullptr;
  if (r.capacity && r.selected) {
    const KvCapacity& c = *r.capacity;
    cap = {{"kv_cache_dtype", c.kv_cache_dtype}, {"bytes_per_token_head", c.bytes_per_token_head},
           {"bfloat16_bytes_per_token_head", c.bfloat16_bytes_per_token_head},
           {"tokens_vs_bfloat16", ratio(c.bfloat16_bytes_per_token_head, c.bytes_per_token_head)}, {"model", nullptr}};
    if (c.model)
      cap["model"] = {{"num_layers", c.model->num_layers}, {"quantized_layers", c.model->quantized_layers},
                      {"bytes_per_token", c.model->bytes_per_token},
                      {"bfloat16_bytes_per_token", c.model->bfloat16_bytes_per_token},
                      {"tokens_vs_bfloat16", ratio(c.model->bfloat16_bytes_per_token, c.model->bytes_per_token)}};
  }
  j["kv_cache_capacity"] = cap;
  return j;
}

void print_table(const ExplainResult& r) {
  std::string where = r.device == "cpu" ? "cpu" : "cuda (compute capability " + r.cc->str() + ", simulated)";
  std::printf("\nAttention backend candidates on %s, in priority order:\n", where.c_str());
  if (r.cfg) std::printf("  for %s\n\n", r.cfg->repr().c_str());
  std::printf("  %-3s %-15s %-9s %s\n", "#", "BACKEND", "STATUS", "REASONS");
  int i = 1;
  for (const auto& [b, reasons] : r.table) {
    const char* status = reasons.empty() ? (r.selected == b ? "SELECTED" : "valid") : "rejected";
    std::printf("  %-3d %-15s %-9s %s\n", i++, std::string(backend_name_str(b)).c_str(), status,
                reasons.empty() ? "-" : join(reasons, "; ").c_str());
  }
  std::printf("\n");
  if (r.selected) {
    std::printf("selected:             %s\n", std::string(backend_name_str(*r.selected)).c_str());
    if (r.fa_version) std::printf("FlashAttention:       version %d\n", *r.fa_version);
    std::printf("KV cache layout:      %s\n", kv_layout_str(r.layout));
    std::printf("KV cache block size:  %d\n", r.block_size);
    if (r.capacity) {
      const KvCapacity& c = *r.capacity;
      std::printf("KV cache slot:        %lld bytes per token and KV head (%s; bfloat16: %lld): %.2fx the tokens of a "
                  "bfloat16 cache\n", (long long)c.bytes_per_token_head, c.kv_cache_dtype.c_str(),
                  (long long)c.bfloat16_bytes_per_token_head, ratio(c.bfloat16_bytes_per_token_head, c.bytes_per_token_head));
      if (c.model) {
        const std::string which = c.model->quantized_layers == 0 ? std::string(": ")
            : str_cat("; ", c.kv_cache_dtype, " on ", c.model->quantized_layers, " of ", c.model->num_layers, " layers: ");
        std::printf("model KV cache:       %lld bytes per token (bfloat16: %lld)%s%.2fx the tokens of a bfloat16 cache\n",
                    (long long)c.model->bytes_per_token, (long long)c.model->bfloat16_bytes_per_token, which.c_str(),
                    ratio(c.model->bfloat16_bytes_per_token, c.model->bytes_per_token));
      }
    }
  } else {
    std::printf("error: %s\n", r.error ? r.error->c_str() : "selection failed");
  }
}

// Runs the explain command; never throws pagoda::Error (errors land in the result).
ExplainResult explain(const std::vector<std::string>& raw, bool* help_only) {
  ExplainResult r;
  EngineArgs args;
  ExplainOptions opt;
  ArgParser parser("pagoda backends select",
                   "Explain which attention backend pagoda would choose on a GPU (simulated; no GPU needed) or the "
                   "CPU, for a model and settings, and why each other candidate was rejected.");
  register_engine_options(parser, args, EngineOptionSet::kExplain);
  parser.add({"--head-size", {}, "N", "Attention head size (default 128, or the model's).", "explain",
              [&](const std::string& v) { opt.head_size = parse_int_arg("--head-size", v); }, {}, {}});
  parser.add({"--device", {}, "D", "cuda (default) or cpu.", "explain",
              [&](const std::string& v) { check_choice("--device", v, {"cuda", "cpu"}); opt.device = v; }, {}, {}});
  parser.add({"--device-capability", {}, "X.Y", "The simulated GPU's compute capability (default 9.0).", "explain",
              [&](const std::string& v) { opt.device_capability = v; }, {}, {}});
  parser.add({"--sliding-window", {}, "N", "The layer uses a sliding window of N tokens (N > 0).", "explain",
              [&](const std::string& v) { opt.sliding_window = parse_int_arg("--sliding-window", v); }, {}, {}});
  parser.add({"--sinks", {}, "", "The layer has attention-sink logits.", "explain",
              [&](const std::string&) { opt.sinks = true; }, {}, {}});
  parser.add({"--attn-type", {}, "T", "decoder (default), encoder, encoder_only or encoder_decoder.", "explain",
              [&](const std::string& v) {
                check_choice("--attn-type", v, {"decoder", "encoder", "encoder_only", "encoder_decoder"});
                opt.attn_type = v;
              }, {}, {}});
  parser.add({"--json", {}, "", "Print one JSON object (stdout) instead of the log lines and the table.", "explain",
              [&](const std::string&) { opt.json = true; }, {}, {}});

  auto fail = [&](const Error& e) {
    r.error = e.what();
    r.exit_code = e.exit_code();
    r.selected.reset();
  };
  std::optional<KvLayout> env_layout;
  try {
    if (!parse_command_line(parser, raw, false)) {
      *help_only = true;
      return r;
    }
    r.device = opt.device;
    if (opt.device == "cpu") {
      r.cc.reset();
      r.block_size = 128;
      if (opt.device_capability) throw_config_error("--device-capability requires --device cuda");
    } else if (opt.device_capability) {
      auto cc = parse_compute_capability(*opt.device_capability);
      if (!cc) throw_config_error("argument --device-capability: invalid value: '", *opt.device_capability,
                                  "' (expected major.minor, e.g. 9.0)");
      r.cc = *cc;
    }
    ValidatedArgs v = validate_engine_args(args);
    env_layout = v.env.kv_cache_layout;
    if (env_layout) r.layout = *env_layout;
    if (v.block_size) r.block_size = *v.block_size;
    if (opt.head_size && *opt.head_size <= 0) throw_config_error("--head-size must be a positive integer, got ", *opt.head_size);

    std::optional<ModelFacts> facts;
    if (parser.given("--model")) facts = read_model_facts(args.model.model);
    const bool cuda = opt.device == "cuda";
    SelectorConfig cfg;
    cfg.head_size = opt.head_size.value_or(facts ? facts->head_size : 128);
    std::optional<DType> checkpoint = facts ? facts->checkpoint_dtype : std::optional<DType>(DType::kBF16);
    cfg.dtype = resolve_model_dtype(v.dtype, checkpoint, cuda && *r.cc < ComputeCapability{8, 0});
    ResolvedAttentionSettings s = resolve_attention_settings(v, cuda ? DeviceKind::kCuda : DeviceKind::kCpu);
    cfg.kv_cache_dtype = effective_kv_cache_dtype(s.kv_cache_dtype, facts && facts->has_kv_cache_scheme);
    cfg.block_size = s.user_block_size;
    cfg.has_sink = opt.sinks;
    cfg.use_per_head_quant_scales = facts && facts->per_head_quant_scales;
    cfg.attn_type = *parse_attn_type(opt.attn_type);
    cfg.has_sliding_window = opt.sliding_window ? *opt.sliding_window > 0 : (facts && facts->layer0_sliding);
    cfg.use_non_causal = s.attention.use_non_causal;
    cfg.use_batch_invariant = s.batch_invariant;
    r.cfg = cfg;

    // The simulated device treats every backend as built (§3.1).
    BackendRegistry registry = BackendRegistry::builtin(/*all_built=*/true);
    SelectionTarget target{cuda ? DeviceKind::kCuda : DeviceKind::kCpu, r.cc.value_or(ComputeCapability{0, 0}), "CUDA device"};
    // Option values (§9.7) before selection: the skip list, against the model's layers when it is known.
    const auto& skip = args.cache.kv_cache_dtype_skip_layers;
    check_kv_cache_dtype_skip_layers(cfg.kv_cache_dtype, skip);
    if (facts && facts->num_layers > 0)
      layer_kv_cache_dtypes(cfg.kv_cache_dtype, facts->num_layers, facts->layer_sliding, skip);
    if (cuda) {
      SelectionEnv env{target.cc, &s.attention, s.batch_invariant};
      for (BackendName b : cuda_priority_list(target.cc, cfg.use_non_causal))
        r.table.emplace_back(b, registry.get(b).why_not(cfg, env));
    }
    AttentionSelector selector(registry, target, s.attention, s.batch_invariant, s.env_layout);
    try {
      BackendName b = selector.select(cfg);
      r.trace = selector.last_trace();
      r.selected = b;
      if (!cuda) r.table.emplace_back(b, std::vector<std::string>{});  // CPU: no candidates, the one choice
      if (auto l = selector.layout_so_far()) r.layout = *l;
      AttentionPlan plan = selector.finalize(s.user_block_size);
      r.layout = plan.kv_layout;
      r.block_size = plan.block_size;
      if (b == BackendName::kFlashAttn) r.fa_version = plan.flash_attn_version;
      try {
        r.capacity = kv_capacity(registry.get(b), cfg, r.block_size, r.layout, facts, skip);
      } catch (const Error&) {
        // No cache shape for this block size (§10: FLASHINFER's pages take any size, its shape only multiples of
        // 16): the selection stands, the capacity is not known.
      }
    } catch (const Error&) {
      r.trace = selector.last_trace();
      if (auto l = selector.layout_so_far()) r.layout = *l;
      throw;
    }
  } catch (const Error& e) {
    fail(e);
  }
  return r;
}

}  // namespace

int run_backends_select(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  bool json = false;
  for (const auto& a : raw) json = json || a == "--json";
  LogCapture capture;
  bool help_only = false;
  ExplainResult r = explain(raw, &help_only);
  if (help_only) return 0;
  if (json) {
    std::printf("%s\n", to_json(r, capture.records()).dump().c_str());
  } else if (r.exit_code == 2) {
    report_error(*r.error);
  } else {
    print_table(r);
    if (r.error) report_error(*r.error);
  }
  return r.exit_code;
}

int run_backends_list(const std::vector<std::string>& raw) {
  bool json = false;
  std::optional<ComputeCapability> cc;
  ArgParser parser("pagoda backends list",
                   "List the attention backends in canonical order: device, what each supports (declared "
                   "capabilities; FLASH_ATTN's FP8/sink rows shown for the given capability), and whether its "
                   "kernels are built into this binary.");
  parser.add({"--json", {}, "", "Print one JSON array.", "", [&](const std::string&) { json = true; }, {}, {}});
  parser.add({"--device-capability", {}, "X.Y", "Capability the capability-dependent rows are shown for (default 9.0).", "",
              [&](const std::string& v) {
                cc = parse_compute_capability(v);
                if (!cc) throw_config_error("argument --device-capability: invalid value: '", v, "'");
              }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  ComputeCapability show_cc = cc.value_or(ComputeCapability{9, 0});
  BackendRegistry registry = BackendRegistry::builtin(false);
  AttentionConfig attention;
  SelectionEnv env{show_cc, &attention, false};
  Json all = Json::array();
  for (BackendName b : kAllBackendNames) {
    const AttentionBackend& backend = registry.get(b);
    Capabilities c = backend.capabilities(SelectorConfig{}, env);
    Json j;
    j["name"] = backend_name_str(b);
    j["device"] = b == BackendName::kCpuAttn ? "cpu" : "cuda";
    j["built"] = registry.built(b);
    Json dtypes = Json::array();
    for (DType d : c.dtypes) dtypes.push_back(std::string(dtype_name(d)));
    j["dtypes"] = dtypes;
    j["kv_cache_dtypes"] = c.kv_cache_dtypes;
    std::string heads;
    if (!c.head_sizes.exact.empty()) {
      std::vector<std::string> hs;
      for (int h : c.head_sizes.exact) hs.push_back(std::to_string(h));
      heads = join(hs, ", ");
    } else {
      std::vector<std::string> parts;
      if (c.head_sizes.multiple_of > 1) parts.push_back(str_cat("multiple of ", c.head_sizes.multiple_of));
      if (c.head_sizes.min > 1) parts.push_back(str_cat(">= ", c.head_sizes.min));
      if (c.head_sizes.max != INT_MAX) parts.push_back(str_cat("<= ", c.head_sizes.max));
      heads = parts.empty() ? (c.head_sizes.min == 1 ? "any" : "> 0") : join(parts, ", ");
    }
    j["head_sizes"] = heads;
    std::string blocks = "any";
    if (!c.block_sizes.empty()) {
      std::vector<std::string> bs;
      for (const auto& r : c.block_sizes) bs.push_back(r.multiple_of ? str_cat("multiple of ", r.size) : std::to_string(r.size));
      blocks = join(bs, ", ");
    }
    j["block_sizes"] = blocks;
    std::string ccs = !c.compute_capability.cuda ? "none (CPU)"
                      : str_cat(">= ", c.compute_capability.min.str(),
                                c.compute_capability.max ? ", <= " + c.compute_capability.max->str() : "");
    if (c.compute_capability.cuda && c.compute_capability.min == ComputeCapability{0, 0} && !c.compute_capability.max) ccs = "any";
    j["compute_capability"] = ccs;
    Json types = Json::array();
    for (AttnType t : c.attn_types) types.push_back(std::string(attn_type_str(t)));
    j["attn_types"] = types;
    j["sinks"] = c.sinks;
    j["per_head_quant_scales"] = c.per_head_quant_scales;
    j["sliding_window"] = c.sliding_window;
    j["non_causal"] = c.non_causal;
    j["batch_invariant"] = c.batch_invariant;
    j["beyond_selection"] = registry.get(b).beyond_selection(show_cc);
    all.push_back(j);
  }
  if (json) {
    std::printf("%s\n", all.dump().c_str());
    return 0;
  }
  std::printf("Attention backends (capability-dependent rows for compute capability %s):\n\n", show_cc.str().c_str());
  for (const auto& j : all) {
    std::printf("%s  [%s]  %s\n", j["name"].get<std::string>().c_str(), j["device"].get<std::string>().c_str(),
                j["built"].get<bool>() ? "built into this binary" : "not built in this binary");
    auto list = [](const Json& a) {
      std::vector<std::string> v;
      for (const auto& x : a) v.push_back(x.get<std::string>());
      return join(v, ", ");
    };
    std::printf("    dtypes: %s\n    kv cache dtypes: %s\n", list(j["dtypes"]).c_str(), list(j["kv_cache_dtypes"]).c_str());
    std::printf("    head sizes: %s\n    block sizes: %s\n    compute capability: %s\n",
                j["head_sizes"].get<std::string>().c_str(), j["block_sizes"].get<std::string>().c_str(),
                j["compute_capability"].get<std::string>().c_str());
    std::printf("    attention types: %s\n", list(j["attn_types"]).c_str());
    std::printf("    sinks: %s, per-head quant scales: %s, sliding window: %s, non-causal: %s, batch invariance: %s\n\n",
                j["sinks"].get<bool>() ? "yes" : "no", j["per_head_quant_scales"].get<bool>() ? "yes" : "no",
                j["sliding_window"].get<bool>() ? "yes" : "no", j["non_causal"].get<bool>() ? "yes" : "no",
                j["batch_invariant"].get<bool>() ? "yes" : "no");
    for (const auto& x : j["beyond_selection"]) std::printf("    pagoda's own: %s\n", x.get<std::string>().c_str());
    if (!j["beyond_selection"].empty()) std::printf("\n");
  }
  return 0;
}

}  // namespace pagoda
