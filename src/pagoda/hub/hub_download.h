// Downloads the files pagoda needs of one hub revision into the huggingface_hub cache, with the hub's
// HTTP API: GET api/models/{repo}/revision/{rev} for the commit and file list, then HEAD and GET of
// {repo}/resolve/{commit}/{file} for each file.
#pragma once

#include <string>

#include "pagoda/core/error.h"
#include "pagoda/hub/hub.h"

namespace pagoda {

// HubOptions merged with the environment, in one place (hub.cc: hub_settings).
struct HubSettings {
  std::string cache_root;
  std::string endpoint;      // no trailing '/'
  std::string token;         // empty: no Authorization header
  std::string token_source;  // where the token came from, for messages ("HF_TOKEN", a file path)
  bool offline = false;
  std::string offline_source;  // "HF_HUB_OFFLINE=1", "HubOptions::offline", ...
  int download_retries = 3;
  int connect_timeout_s = 10;
  int stall_timeout_s = 60;
  bool progress = true;
};

HubSettings hub_settings(const HubOptions& options);

// The hub could not be reached at all (name resolution, connection, TLS) when asking for the file list;
// resolve_model turns it into the "not cached and cannot download" message.
class HubUnreachable : public Error {
 public:
  explicit HubUnreachable(std::string detail) : Error(ErrorKind::kRuntime, std::move(detail)) {}
};

// Files pagoda reads besides the weights; downloaded when the repo has them.
inline constexpr const char* kHubSideFiles[] = {
    "config.json",      "generation_config.json",  "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
};

// Downloads (or finds in blobs/) every needed file of ref, then links snapshots/{commit}/ and writes
// refs/{revision}, in that order, so an interrupted run never leaves a snapshot that looks complete.
// Returns the snapshot directory. Throws HubUnreachable, or Error (runtime) for HTTP errors and bad data.
std::string download_model(const HubSettings& settings, const RepoRef& ref);

}  // namespace pagoda
