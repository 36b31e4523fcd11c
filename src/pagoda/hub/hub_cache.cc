#include "pagoda/hub/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace fs = std::filesystem;

namespace {

std::string repo_folder_name(const std::string& repo_id) {
  std::string out = "models--";
  for (char c : repo_id) {
    if (c == '/') {
      out += "--";
    } else {
      out += c;
    }
  }
  return out;
}

// A file name the hub lists that is safe to join under a snapshot dir: relative, no "..", no empty parts.
bool is_safe_relative_path(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\\') != std::string::npos) return false;
  for (const auto& part : split(name, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// A temp name next to `path`, unique across processes and threads, for write-then-rename.
std::string temp_name(const std::string& path) {
  static std::atomic<unsigned long> counter{0};
  return str_cat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

}  // namespace

RepoCache::RepoCache(std::string cache_root, const std::string& repo_id)
    : root_(std::move(cache_root)), folder_(repo_folder_name(repo_id)), dir_(root_ + "/" + folder_) {}

std::string RepoCache::blob_path(const std::string& etag) const { return dir_ + "/blobs/" + etag; }
std::string RepoCache::incomplete_path(const std::string& etag) const { return blob_path(etag) + ".incomplete"; }
std::string RepoCache::lock_path(const std::string& etag) const {
  return root_ + "/.locks/" + folder_ + "/" + etag + ".lock";
}
std::string RepoCache::snapshot_dir(const std::string& commit) const { return dir_ + "/snapshots/" + commit; }

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::optional<std::string> RepoCache::commit_for(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  std::ifstream in(dir_ + "/refs/" + revision);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string commit(trim(ss.str()));
  if (!is_commit_hash(commit)) {
    PAGODA_LOG_WARNING("ignoring ", dir_, "/refs/", revision, ": '", commit, "' is not a commit hash");
    return std::nullopt;
  }
  return commit;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  std::string path = dir_ + "/refs/" + revision;
  fs::create_directories(fs::path(path).parent_path());
  write_text_file_atomic(path, commit);  // no trailing newline, as huggingface_hub writes it
}

bool RepoCache::snapshot_has(const std::string& commit, const std::string& filename) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_dir(commit) + "/" + filename, ec);  // follows the symlink
}

std::string RepoCache::snapshot_missing(const std::string& commit) const {
  std::string snap = snapshot_dir(commit);
  std::error_code ec;
  if (!fs::is_directory(snap, ec)) return str_cat("no snapshot ", snap);
  std::vector<std::string> need = {"config.json"};
  if (snapshot_has(commit, "model.safetensors.index.json")) {
    try {
      auto shards = index_weight_files(read_text_file(snap + "/model.safetensors.index.json"),
                                       snap + "/model.safetensors.index.json");
      need.insert(need.end(), shards.begin(), shards.end());
    } catch (const Error& e) {
      return e.what();
    }
  } else {
    need.push_back("model.safetensors");
  }
  std::vector<std::string> missing;
  for (const auto& f : need) {
    if (!snapshot_has(commit, f)) missing.push_back(f);
  }
  if (missing.empty()) return "";
  return str_cat("snapshot ", snap, " lacks ", join(missing, ", "));
}

void RepoCache::link_snapshot_file(const std::string& commit, const std::string& filename,
                                   const std::string& etag) const {
  fs::path link = fs::path(snapshot_dir(commit)) / filename;
  fs::create_directories(link.parent_path());
  fs::path target = fs::relative(fs::path(blob_path(etag)), link.parent_path());
  fs::path tmp = temp_name(link.string());
  fs::create_symlink(target, tmp);
  fs::rename(tmp, link);  // atomic replacement of an older entry
}

std::vector<std::string> index_weight_files(const std::string& index_json, const std::string& source) {
  check_json_depth(index_json, source);
  nlohmann::json j = nlohmann::json::parse(index_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw_runtime_error(source, " is not a valid safetensors index: expected a JSON object with a \"weight_map\" object");
  }
  std::set<std::string> files;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || !is_safe_relative_path(file.get<std::string>())) {
      throw_runtime_error(source, ": weight_map entry for '", text_preview(tensor), "' is not a relative file name");
    }
    files.insert(file.get<std::string>());
  }
  if (files.empty()) throw_runtime_error(source, " lists no weight files");
  return {files.begin(), files.end()};
}

FileLock::FileLock(const std::string& path, const std::string& what) {
  fs::create_directories(fs::path(path).parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_runtime_error("cannot open lock file ", path, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  PAGODA_LOG_INFO("waiting for another process that is downloading ", what, " (lock ", path, ")");
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd_);
      throw_runtime_error("cannot lock ", path, ": ", std::strerror(errno));
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_runtime_error("cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = temp_name(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw_runtime_error("cannot write ", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw_runtime_error("cannot write ", path, ": ", ec.message());
  }
}

}  // namespace pagoda
