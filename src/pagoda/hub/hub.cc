#include "pagoda/hub/hub.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/hub/hub_cache.h"
#include "pagoda/hub/hub_download.h"

namespace pagoda {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDefaultEndpoint = "https://huggingface.co";
constexpr size_t kMaxRepoIdLength = 96;  // huggingface_hub's validate_repo_id limit

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// huggingface_hub's _is_true: 1, ON, YES, TRUE (any case).
bool env_is_true(const char* name) {
  std::string v = to_upper(trim(env(name)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string home_dir() {
  std::string home = env("HOME");
  if (!home.empty()) return home;
  const passwd* pw = getpwuid(getuid());
  return pw != nullptr && pw->pw_dir != nullptr ? pw->pw_dir : "/";
}

std::string expand_user(const std::string& path) {
  if (path == "~") return home_dir();
  if (starts_with(path, "~/")) return home_dir() + path.substr(1);
  return path;
}

// HF_HOME, else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::string hf_home() {
  std::string h = env("HF_HOME");
  if (!h.empty()) return expand_user(h);
  std::string xdg = env("XDG_CACHE_HOME");
  return (xdg.empty() ? home_dir() + "/.cache" : expand_user(xdg)) + "/huggingface";
}

bool is_repo_id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}
bool is_word_char(char c) { return is_repo_id_char(c) && c != '-' && c != '.'; }

bool is_valid_revision(const std::string& rev) {
  if (rev.empty() || rev.size() > 255 || rev.front() == '/' || rev.back() == '/') return false;
  if (rev.find("..") != std::string::npos || rev.find("//") != std::string::npos) return false;
  for (char c : rev) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '\\' || c == 0x7f) return false;
  }
  return true;
}

std::string describe(const RepoRef& ref) { return str_cat("'", ref.repo_id, "' (revision ", ref.revision, ")"); }

}  // namespace

HubSettings hub_settings(const HubOptions& options) {
  HubSettings s;
  if (!options.cache_dir.empty()) {
    s.cache_root = expand_user(options.cache_dir);
  } else if (!env("HF_HUB_CACHE").empty()) {
    s.cache_root = expand_user(env("HF_HUB_CACHE"));
  } else if (!env("HUGGINGFACE_HUB_CACHE").empty()) {  // the older name huggingface_hub still reads
    s.cache_root = expand_user(env("HUGGINGFACE_HUB_CACHE"));
  } else {
    s.cache_root = hf_home() + "/hub";
  }

  s.endpoint = !options.endpoint.empty() ? options.endpoint : env("HF_ENDPOINT");
  if (s.endpoint.empty()) s.endpoint = kDefaultEndpoint;
  while (s.endpoint.size() > 1 && s.endpoint.back() == '/') s.endpoint.pop_back();

  if (!options.token.empty()) {
    s.token = options.token;
    s.token_source = "the options";
  } else if (!std::string(trim(env("HF_TOKEN"))).empty()) {
    s.token = trim(env("HF_TOKEN"));
    s.token_source = "HF_TOKEN";
  } else if (!std::string(trim(env("HUGGING_FACE_HUB_TOKEN"))).empty()) {
    s.token = trim(env("HUGGING_FACE_HUB_TOKEN"));
    s.token_source = "HUGGING_FACE_HUB_TOKEN";
  } else {
    std::string path = env("HF_TOKEN_PATH");
    path = path.empty() ? hf_home() + "/token" : expand_user(path);
    std::ifstream in(path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      s.token = trim(ss.str());
      s.token_source = path;
    }
  }

  if (options.offline) {
    s.offline = true;
    s.offline_source = "offline mode was requested";
  } else if (env_is_true("HF_HUB_OFFLINE")) {
    s.offline = true;
    s.offline_source = str_cat("HF_HUB_OFFLINE=", env("HF_HUB_OFFLINE"));
  } else if (env_is_true("TRANSFORMERS_OFFLINE")) {
    s.offline = true;
    s.offline_source = str_cat("TRANSFORMERS_OFFLINE=", env("TRANSFORMERS_OFFLINE"));
  }
  s.download_retries = std::max(0, options.download_retries);
  s.connect_timeout_s = std::max(1, options.connect_timeout_s);
  s.stall_timeout_s = std::max(1, options.stall_timeout_s);
  s.progress = options.progress;
  return s;
}

bool is_valid_repo_id(std::string_view repo_id) {
  if (repo_id.empty() || repo_id.size() > kMaxRepoIdLength) return false;
  if (repo_id.find("--") != std::string_view::npos || repo_id.find("..") != std::string_view::npos) return false;
  auto parts = split(repo_id, '/');
  if (parts.size() > 2) return false;
  for (const auto& p : parts) {
    if (p.empty() || !is_word_char(p.front()) || !is_word_char(p.back())) return false;
    for (char c : p) {
      if (!is_repo_id_char(c)) return false;
    }
  }
  return true;
}

std::optional<RepoRef> parse_repo_ref(const std::string& name, const std::string& default_revision) {
  RepoRef ref;
  size_t at = name.find('@');  // repo ids never contain '@'; revisions may contain '/'
  ref.repo_id = name.substr(0, at);
  ref.revision = at == std::string::npos ? default_revision : name.substr(at + 1);
  if (ref.revision.empty() && at == std::string::npos) ref.revision = "main";
  if (!is_valid_repo_id(ref.repo_id) || !is_valid_revision(ref.revision)) return std::nullopt;
  return ref;
}

std::string hub_cache_dir(const HubOptions& options) { return hub_settings(options).cache_root; }

std::optional<std::string> find_cached_model(const RepoRef& ref, const HubOptions& options) {
  RepoCache cache(hub_cache_dir(options), ref.repo_id);
  auto commit = cache.commit_for(ref.revision);
  if (!commit || !cache.snapshot_missing(*commit).empty()) return std::nullopt;
  return cache.snapshot_dir(*commit);
}

std::string resolve_model(const std::string& name_or_path, const HubOptions& options) {
  if (name_or_path.empty()) throw_config_error("no model given: pass a model directory or a Hugging Face repo id (org/name)");
  std::error_code ec;
  if (fs::is_directory(name_or_path, ec)) return name_or_path;
  if (fs::exists(name_or_path, ec)) {
    throw_config_error("model '", name_or_path, "' is a file, not a model directory: pass the directory that holds ",
                       "config.json and the weights");
  }
  auto ref = parse_repo_ref(name_or_path, options.revision);
  if (!ref) {
    throw_config_error("model '", name_or_path, "' is not an existing local directory and not a valid Hugging Face ",
                       "repo id: pass a directory that holds config.json, or a repo id 'org/name' (optionally ",
                       "'org/name@revision')");
  }

  HubSettings settings = hub_settings(options);
  RepoCache cache(settings.cache_root, ref->repo_id);
  auto commit = cache.commit_for(ref->revision);
  std::string missing = commit ? cache.snapshot_missing(*commit) : "";
  if (commit && missing.empty()) {
    std::string dir = cache.snapshot_dir(*commit);
    PAGODA_LOG_INFO("model ", describe(*ref), ": using the cached snapshot ", dir);
    return dir;
  }

  std::string not_here = str_cat("model ", describe(*ref), " is not a local directory and ",
                                 commit ? str_cat("its snapshot in the Hugging Face cache is incomplete (", missing, ")")
                                        : str_cat("not in the Hugging Face cache at ", cache.dir()));
  std::string cli = str_cat("`huggingface-cli download ", ref->repo_id,
                            ref->revision == "main" ? "" : str_cat(" --revision ", ref->revision), "`");
  if (settings.offline) {
    throw_runtime_error(not_here, ", and downloading is disabled (", settings.offline_source, "). To fix: download it ",
                        "while online with ", cli, ", pass a local model directory, or allow downloads (unset ",
                        "HF_HUB_OFFLINE).");
  }
  try {
    std::string dir = download_model(settings, *ref);
    PAGODA_LOG_INFO("model ", describe(*ref), ": downloaded to ", dir);
    return dir;
  } catch (const fs::filesystem_error& e) {
    throw_runtime_error("cannot write model ", describe(*ref), " into the Hugging Face cache at ", settings.cache_root,
                        ": ", e.what(), ". To fix: free disk space or make the cache writable, or set HF_HUB_CACHE ",
                        "(or HF_HOME) to a writable directory.");
  } catch (const HubUnreachable& e) {
    throw_runtime_error(not_here, ", and downloading it failed: ", e.what(), ". To fix: check the network or proxy, ",
                        "download it with ", cli, " where the hub is reachable (into this cache), pass a local model ",
                        "directory, or set HF_ENDPOINT to a reachable hub mirror.");
  }
}

}  // namespace pagoda
