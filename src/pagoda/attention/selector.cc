#include "pagoda/attention/selector.h"

#include "pagoda/attention/flash_attn/fa_version.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {

std::vector<BackendName> cuda_priority_list(ComputeCapability cc, bool use_non_causal) {
  if (cc.major == 10 && !use_non_causal)
    return {BackendName::kFlashInfer, BackendName::kFlashAttn, BackendName::kTritonAttn, BackendName::kFlexAttention,
            BackendName::kTurboQuant};
  return {BackendName::kFlashAttn, BackendName::kFlashInfer, BackendName::kTritonAttn, BackendName::kFlexAttention,
          BackendName::kTurboQuant};
}

AttentionSelector::AttentionSelector(const BackendRegistry& registry, SelectionTarget target,
                                     const AttentionConfig& attention, bool batch_invariant,
                                     std::optional<KvLayout> env_layout)
    : registry_(registry), target_(std::move(target)), attention_(attention), batch_invariant_(batch_invariant),
      env_layout_(env_layout) {}

std::vector<std::string> AttentionSelector::validate(BackendName b, const SelectorConfig& cfg) const {
  if (!registry_.built(b)) return {"not built in this binary"};
  SelectionEnv env{target_.cc, &attention_, batch_invariant_};
  return registry_.get(b).why_not(cfg, env);
}

BackendName AttentionSelector::select(const SelectorConfig& cfg) {
  std::optional<BackendName> forced = attention_.forced_backend_for_kind(cfg.layer_kind());
  auto key = std::make_pair(forced, cfg);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  BackendName b = target_.kind == DeviceKind::kCpu ? select_cpu(cfg, forced) : select_cuda(cfg, forced);
  cache_.emplace(key, b);
  bool seen = false;
  for (const auto& [sb, scfg] : selected_) seen = seen || (sb == b && scfg == cfg);
  if (!seen) selected_.emplace_back(b, cfg);
  after_selection(b);
  return b;
}

namespace {
std::string reasons_py(const std::vector<std::string>& r) { return py_str_list(r); }
std::string reasons_bare(const std::vector<std::string>& r) { return "[" + join(r, ", ") + "]"; }
}  // namespace

BackendName AttentionSelector::select_cuda(const SelectorConfig& cfg, std::optional<BackendName> forced) {
  trace_ = {};
  if (forced) {  // §5.2: no fallback
    auto reasons = validate(*forced, cfg);
    if (!reasons.empty()) {
      trace_.rejected.emplace_back(*forced, reasons);
      throw_runtime_error("Selected backend ", backend_name_str(*forced),
                          " is not valid for this configuration. Reason: ", reasons_py(reasons));
    }
    trace_.potential = {*forced};
    PAGODA_LOG_INFO("Using ", backend_name_str(*forced), " backend.");
    return *forced;
  }
  // §5.3 automatic selection.
  struct Valid { BackendName b; size_t priority; };
  std::vector<Valid> valid;
  std::vector<std::tuple<BackendName, size_t, std::vector<std::string>>> invalid;
  auto order = cuda_priority_list(target_.cc, cfg.use_non_causal);
  for (size_t p = 0; p < order.size(); ++p) {
    auto r = validate(order[p], cfg);
    if (r.empty()) valid.push_back({order[p], p});
    else invalid.emplace_back(order[p], p, r);
  }
  std::vector<std::string> parts;
  for (const auto& [b, p, r] : invalid) {
    parts.push_back(str_cat(backend_name_str(b), ": ", reasons_bare(r)));
    trace_.rejected.emplace_back(b, r);
  }
  std::string reasons_str = "{" + join(parts, ", ") + "}";
  std::string debug = str_cat("Some attention backends are not valid for cuda with ", cfg.repr(), ". Reasons: ", reasons_str, ".");
  if (first_time(debug)) PAGODA_LOG_DEBUG(debug);
  if (valid.empty())
    throw_runtime_error("No valid attention backend found for cuda with ", cfg.repr(), ". Reasons: ", reasons_str, ".");
  const Valid selected = valid.front();
  if (cfg.block_size) {
    std::vector<std::string> excluded;
    for (const auto& [b, p, r] : invalid)
      if (p < selected.priority && r == std::vector<std::string>{"block_size not supported"})
        excluded.emplace_back(backend_name_str(b));
    if (!excluded.empty())
      PAGODA_LOG_WARNING("--block-size ", *cfg.block_size, " precluded higher-priority backend(s) ", join(excluded, ", "),
                         ". Using ", backend_name_str(selected.b), " instead, which may result in reduced performance. ",
                         "Consider removing --block-size to auto-select the optimal block size.");
  }
  std::vector<std::string> names;
  for (const auto& v : valid) {
    names.emplace_back(backend_name_str(v.b));
    trace_.potential.push_back(v.b);
  }
  std::string info = str_cat("Using ", backend_name_str(selected.b), " attention backend out of potential backends: ",
                             py_str_list(names), ".");
  if (first_time(info)) PAGODA_LOG_INFO(info);
  return selected.b;
}

// §5.4, with additions (docs/architecture.md, "Where pagoda goes beyond the spec"): a layer whose KV cache
// dtype is a TurboQuant preset runs on TURBOQUANT, whose CPU runner reads the packed cache; a forced
// FLEX_ATTENTION or FLASHINFER serves every other layer with its CPU runner; the rest (TurboQuant boundary
// layers included) runs on CPU_ATTN. Forcing CPU_ATTN keeps CPU_ATTN, whose construction check then refuses
// the TurboQuant cache (§6.4).
BackendName AttentionSelector::select_cpu(const SelectorConfig& cfg, std::optional<BackendName> forced) {
  trace_ = {};
  const bool turboquant = is_turboquant_kv_dtype(cfg.kv_cache_dtype) && forced != BackendName::kCpuAttn;
  const BackendName selected = turboquant                                   ? BackendName::kTurboQuant
                               : forced == BackendName::kFlexAttention ? BackendName::kFlexAttention
                               : forced == BackendName::kFlashInfer    ? BackendName::kFlashInfer
                                                                         : BackendName::kCpuAttn;
  if (forced && *forced != selected && *forced != BackendName::kCpuAttn)
    PAGODA_LOG_INFO("Cannot use ", backend_name_str(*forced), " backend on CPU.");
  trace_.potential = {selected};
  std::string info = str_cat("Using ", backend_name_str(selected), " attention backend out of potential backends: ['",
                             backend_name_str(selected), "'].");
  if (first_time(info)) PAGODA_LOG_INFO(info);
  return selected;
}

void AttentionSelector::after_selection(BackendName b) {
  auto required = registry_.get(b).required_kv_layout(target_.cc);
  if (!required) return;
  layout_ = *required;
  std::string info = str_cat("Using ", kv_layout_str(*required), " KV cache layout for ", backend_name_str(b), " backend.");
  if (first_time(info)) PAGODA_LOG_INFO(info);
}

AttentionPlan AttentionSelector::finalize(std::optional<int> user_block_size) {
  AttentionPlan plan;
  PAGODA_CHECK(!selected_.empty(), "finalize() before any layer was selected");
  // §6.3 block size.
  if (user_block_size) {
    plan.block_size = *user_block_size;
  } else if (target_.kind == DeviceKind::kCpu) {
    plan.block_size = 128;
  } else {
    const auto& [b, cfg] = selected_.front();
    SelectionEnv env{target_.cc, &attention_, batch_invariant_};
    plan.block_size = registry_.get(b).preferred_block_size(cfg, env, 16);
    if (plan.block_size != 16) {
      std::string info = str_cat("Setting kv cache block size to ", plan.block_size, " for ", backend_name_str(b), " backend.");
      if (first_time(info)) PAGODA_LOG_INFO(info);
    }
  }
  // §6.1 and §6.4: construction of the selected backends.
  ConstructionEnv cenv{target_.kind, target_.cc, target_.device_name, &attention_, batch_invariant_};
  for (const auto& [b, cfg] : selected_) {
    if (b == BackendName::kFlashAttn) {
      auto r = resolve_fa_version(target_.cc, attention_.flash_attn_version, batch_invariant_);
      for (const auto& rec : r.log) {
        if (!first_time(rec.message)) continue;
        if (rec.level == LogLevel::kError) PAGODA_LOG_ERROR(rec.message);
        else PAGODA_LOG_WARNING(rec.message);
      }
      if (r.version) {
        std::string info = str_cat("Using FlashAttention version ", *r.version);
        if (first_time(info)) PAGODA_LOG_INFO(info);
        plan.flash_attn_version = r.version;
      }
    }
    registry_.get(b).check_construction(cfg, cenv);
    if (attention_.use_cascade_attention && !registry_.get(b).serves_cascade())
      throw_runtime_error("use_cascade_attention is served by the FLASHINFER attention backend only; ",
                          backend_name_str(b), " was selected. Force --attention-backend FLASHINFER or leave "
                          "attention_config.use_cascade_attention false.");
  }
  // §6.2 KV layout, resolved when the KV cache is allocated.
  if (layout_) {
    plan.kv_layout = *layout_;
  } else if (env_layout_) {
    plan.kv_layout = *env_layout_;
    std::string info = str_cat("`PAGODA_KV_CACHE_LAYOUT` environment variable detected. Setting KV cache layout to ",
                               kv_layout_str(*env_layout_), ".");
    if (first_time(info)) PAGODA_LOG_INFO(info);
  }
  return plan;
}

}  // namespace pagoda
