// The huggingface_hub cache layout of one model repository (see hub.h for the tree).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pagoda {

class RepoCache {
 public:
  RepoCache(std::string cache_root, const std::string& repo_id);

  const std::string& root() const { return root_; }
  const std::string& dir() const { return dir_; }  // <root>/models--{org}--{name}
  std::string blob_path(const std::string& etag) const;
  std::string incomplete_path(const std::string& etag) const;  // blobs/{etag}.incomplete
  std::string lock_path(const std::string& etag) const;        // <root>/.locks/models--.../{etag}.lock
  std::string snapshot_dir(const std::string& commit) const;

  // The commit a revision names: the revision itself when it is a 40-hex hash, else refs/{revision}.
  std::optional<std::string> commit_for(const std::string& revision) const;
  // Writes refs/{revision} (atomically: temp file, then rename). A commit-hash revision has no ref.
  void write_ref(const std::string& revision, const std::string& commit) const;

  // Empty when snapshots/{commit} has config.json and every weight file (the ones the index lists, or
  // model.safetensors); otherwise what is missing, for messages.
  std::string snapshot_missing(const std::string& commit) const;
  // True when snapshots/{commit}/{filename} exists and resolves to a readable file.
  bool snapshot_has(const std::string& commit, const std::string& filename) const;
  // snapshots/{commit}/{filename} -> ../../blobs/{etag} (relative, as huggingface_hub writes it);
  // replaces an existing entry atomically.
  void link_snapshot_file(const std::string& commit, const std::string& filename, const std::string& etag) const;

 private:
  std::string root_;
  std::string folder_;  // models--{org}--{name}
  std::string dir_;
};

// The weight files a model.safetensors.index.json lists (weight_map values, deduplicated, sorted).
// Throws a runtime error naming `source` when the JSON is malformed or a name is not a plain file name.
std::vector<std::string> index_weight_files(const std::string& index_json, const std::string& source);

bool is_commit_hash(const std::string& s);  // 40 lower-case hex characters

// An exclusive flock(2) on a lock file, as huggingface_hub's filelock takes it, so concurrent downloads of
// one blob (pagoda or Python) do not write the same .incomplete file.
class FileLock {
 public:
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

std::string read_text_file(const std::string& path);  // throws a runtime error naming the path
// Writes via a temp file in the same directory and rename(2), so readers never see a partial file.
void write_text_file_atomic(const std::string& path, const std::string& text);

}  // namespace pagoda
