// Incremental SHA-256, the hash Git LFS uses as the ETag of large files on the Hugging Face hub.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace pagoda {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n);
  // Lower-case hex digest (64 chars). Ends this hash; call reset() before reuse.
  std::string hex_digest();
  void reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(std::string_view data);
// Hashes a whole file; throws a runtime error when it cannot be read.
std::string sha256_file_hex(const std::string& path);
// True for a 64-character lower- or upper-case hex string (what an LFS ETag looks like).
bool is_sha256_hex(std::string_view s);

}  // namespace pagoda
