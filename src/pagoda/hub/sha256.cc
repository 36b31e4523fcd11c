#include "pagoda/hub/sha256.h"

#include <openssl/evp.h>

#include <cctype>
#include <cstdio>

#include "pagoda/core/error.h"

namespace pagoda {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  PAGODA_CHECK(state_->ctx != nullptr, "EVP_MD_CTX_new failed");
  reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->ctx); }

void Sha256::reset() {
  PAGODA_CHECK(EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) == 1, "EVP_DigestInit_ex(sha256) failed");
}

void Sha256::update(const void* data, size_t n) {
  PAGODA_CHECK(EVP_DigestUpdate(state_->ctx, data, n) == 1, "EVP_DigestUpdate failed");
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  PAGODA_CHECK(EVP_DigestFinal_ex(state_->ctx, md, &len) == 1 && len == 32, "EVP_DigestFinal_ex failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw_runtime_error("cannot read ", path, " to check its sha256");
  Sha256 h;
  std::string buf(1 << 20, '\0');
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw_runtime_error("error reading ", path, " to check its sha256");
  return h.hex_digest();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace pagoda
