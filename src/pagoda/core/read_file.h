// Whole-file reads of the files pagoda parses (config.json, tokenizer.json, index files, --config files),
// with a size bound: real files are far smaller, and a bigger one is the wrong file or a hostile one
// whose parse would exhaust memory.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

// config.json, generation_config.json, tokenizer_config.json, special_tokens_map.json, safetensors index
// files (the largest real ones, with ~100k tensors, are ~10 MiB) and --config / --json-config files.
inline constexpr uint64_t kMaxConfigFileBytes = 64ull << 20;
// tokenizer.json (the largest real ones, 250k-token vocabularies, are ~35 MiB).
inline constexpr uint64_t kMaxTokenizerFileBytes = 512ull << 20;

// The bytes of `path`. Throws pagoda::Error: runtime kind when it cannot be read, config kind (naming the
// file, its size and the limit) when it is larger than `max_bytes` or not a regular file.
std::string read_user_file(const std::string& path, uint64_t max_bytes);

}  // namespace pagoda
