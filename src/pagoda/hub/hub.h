// Finds a model's files: a local directory, a snapshot in the Hugging Face cache, or a download from the
// hub into that cache.
//
// The cache is the one huggingface_hub uses, laid out the same way, so `huggingface-cli download` and
// pagoda share downloads:
//   <cache>/models--{org}--{name}/refs/{revision}          the commit hash the revision points to
//   <cache>/models--{org}--{name}/blobs/{etag}             file contents (sha256 for LFS files)
//   <cache>/models--{org}--{name}/snapshots/{commit}/{f}   relative symlinks to ../../blobs/{etag}
//   <cache>/.locks/models--{org}--{name}/{etag}.lock       flock(2) held while a blob downloads
//
// Environment variables, read as huggingface_hub reads them (a non-empty HubOptions field wins):
//   HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
//   HF_ENDPOINT (default https://huggingface.co)
//   HF_TOKEN, else the file HF_TOKEN_PATH, else HF_HOME/token (sent as `Authorization: Bearer ...`)
//   HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1): never use the network
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pagoda {

struct HubOptions {
  std::string revision = "main";  // branch, tag or commit hash; `org/name@rev` in the model name overrides it
  std::string cache_dir;          // empty: from the environment (see above)
  std::string endpoint;           // empty: HF_ENDPOINT or https://huggingface.co
  std::string token;              // empty: HF_TOKEN or the token file
  bool offline = false;           // true, or HF_HUB_OFFLINE=1: cache only
  int download_retries = 3;       // resumes after an interrupted transfer (connection lost, 5xx) per file
  int connect_timeout_s = 10;
  int stall_timeout_s = 60;       // a transfer with no progress for this long counts as interrupted
  bool progress = true;           // bar on stderr when it is a terminal, else a log line per file
};

// Returns a local directory holding config.json and the weights of `name_or_path`:
//   - an existing local directory is returned as is;
//   - a repo id `org/name` or `org/name@revision` is looked up in the cache and, when no complete snapshot
//     is there (config.json and every weight file), downloaded from the hub; the snapshot dir is returned.
// Throws pagoda::Error: config kind when the name is neither a directory nor a valid repo id; runtime kind
// when the model is not cached and cannot be downloaded (offline, unreachable, 401/403, 404, corrupt data).
std::string resolve_model(const std::string& name_or_path, const HubOptions& options = {});

struct RepoRef {
  std::string repo_id;   // "org/name" (or "name" for the few legacy repos without an org)
  std::string revision;
};

// huggingface_hub's repo id rules: [org/]name of letters, digits, '-', '_', '.'; no "--" or ".."; does not
// start or end with '-' or '.'; at most 96 characters.
bool is_valid_repo_id(std::string_view repo_id);
// Splits `org/name@revision`; nullopt when the repo id or the revision is not valid.
std::optional<RepoRef> parse_repo_ref(const std::string& name, const std::string& default_revision);

// The cache root used for these options (HF_HUB_CACHE, HF_HOME/hub, ...).
std::string hub_cache_dir(const HubOptions& options = {});
// The snapshot directory of repo_id@revision when the cache holds it completely; never uses the network.
std::optional<std::string> find_cached_model(const RepoRef& ref, const HubOptions& options = {});

}  // namespace pagoda
