// `pagoda generate`: run a model on a prompt, streaming the text, with the engine's startup lines.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/utf8.h"
#include "pagoda/engine/engine.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/tokenizer/chat_template.h"

namespace pagoda {
namespace {

struct GenerateOptions {
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;
  std::optional<std::string> prompt_token_ids;
  std::optional<bool> chat;  // unset: a chat for the built-in model, plain text for the others
  int max_tokens = 64;
  SamplingParams sampling;
  bool temperature_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int logprobs = 0;
  bool output_json = false;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  for (const auto& part : split(s, ',')) {
    long long v = 0;
    std::string_view t = trim(part);
    if (t.empty()) continue;
    if (!parse_int64(t, &v) || v < 0 || v > INT32_MAX)
      throw_config_error("argument --prompt-token-ids: invalid token id '", std::string(t), "' (expected comma-separated integers)");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) throw_config_error("argument --prompt-token-ids: no token ids given");
  return ids;
}

}  // namespace

int run_generate(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  EngineArgs args;
  GenerateOptions g;
  ArgParser parser("pagoda generate",
                   "Generate text from a prompt with a model (a local Hugging Face folder, a GGUF file, a hub repo "
                   "id, or a built-in: smollm2:135m, the default, or dummy:tiny), streaming it to stdout; startup "
                   "lines and statistics go to stderr. With no --model and no prompt it asks the built-in model a "
                   "short question as a chat.");
  register_engine_options(parser, args, EngineOptionSet::kEngine);
  parser.add({"--prompt", {}, "TEXT", "The prompt (BOS is added as the tokenizer says; \"\" = BOS only).", "generate",
              [&](const std::string& v) { g.prompt = v; }, {}, {}});
  parser.add({"--prompt-file", {}, "FILE", "Read the prompt from a file.", "generate",
              [&](const std::string& v) { g.prompt_file = v; }, {}, {}});
  parser.add({"--prompt-token-ids", {}, "IDS", "The prompt as comma-separated token ids (no BOS added).", "generate",
              [&](const std::string& v) { g.prompt_token_ids = v; }, {}, {}});
  parser.add({"--chat", {}, "", "Send the prompt as a user message through the model's chat template "
              "(the default for the built-in model).", "generate",
              [&](const std::string&) { g.chat = true; }, {}, {}});
  parser.add({"--no-chat", {}, "", "Send the prompt as plain text (the default for other models).", "generate",
              [&](const std::string&) { g.chat = false; }, {}, {}});
  parser.add({"--max-tokens", {}, "N", "Maximum number of generated tokens.", "generate",
              [&](const std::string& v) { g.max_tokens = parse_int_arg("--max-tokens", v); },
              [&] { return std::to_string(g.max_tokens); }, {}});
  parser.add({"--temperature", {}, "T", "Sampling temperature; 0 = greedy (default 1.0).", "sampling",
              [&](const std::string& v) { g.sampling.temperature = float(parse_float_arg("--temperature", v)); g.temperature_given = true; },
              [&] { return std::to_string(g.sampling.temperature); }, {}});
  parser.add({"--top-k", {}, "K", "Keep the K most likely tokens (0 or -1 = all).", "sampling",
              [&](const std::string& v) { g.sampling.top_k = parse_int_arg("--top-k", v); }, {}, {}});
  parser.add({"--top-p", {}, "P", "Nucleus sampling: keep the smallest set with probability >= P.", "sampling",
              [&](const std::string& v) { g.sampling.top_p = float(parse_float_arg("--top-p", v)); }, {}, {}});
  parser.add({"--min-p", {}, "P", "Drop tokens with probability < P x the largest.", "sampling",
              [&](const std::string& v) { g.sampling.min_p = float(parse_float_arg("--min-p", v)); }, {}, {}});
  parser.add({"--repetition-penalty", {}, "R", "Penalise tokens of the prompt and output (1 = off).", "sampling",
              [&](const std::string& v) { g.sampling.repetition_penalty = float(parse_float_arg("--repetition-penalty", v)); }, {}, {}});
  parser.add({"--presence-penalty", {}, "X", "Subtract X from tokens already generated.", "sampling",
              [&](const std::string& v) { g.sampling.presence_penalty = float(parse_float_arg("--presence-penalty", v)); }, {}, {}});
  parser.add({"--frequency-penalty", {}, "X", "Subtract X per occurrence in the output.", "sampling",
              [&](const std::string& v) { g.sampling.frequency_penalty = float(parse_float_arg("--frequency-penalty", v)); }, {}, {}});
  parser.add({"--stop", {}, "TEXT", "Stop when the output contains TEXT (repeatable).", "sampling",
              [&](const std::string& v) { g.stop.push_back(v); }, {}, {}});
  parser.add({"--ignore-eos", {}, "", "Keep generating past the end-of-sequence token.", "sampling",
              [&](const std::string&) { g.ignore_eos = true; }, {}, {}});
  parser.add({"--logprobs", {}, "K", "Report the top K logprobs of each generated position (raw logits).", "output",
              [&](const std::string& v) { g.logprobs = parse_int_arg("--logprobs", v); }, {}, {}});
  parser.add({"--output-json", {}, "", "Print one JSON object instead of streaming the text.", "output",
              [&](const std::string&) { g.output_json = true; }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  ValidatedArgs v = validate_engine_command(args);
  int sources = int(g.prompt.has_value()) + int(g.prompt_file.has_value()) + int(g.prompt_token_ids.has_value());
  if (sources > 1) throw_config_error("give only one of --prompt, --prompt-file and --prompt-token-ids");
  if (g.max_tokens < 0) throw_config_error("--max-tokens must be >= 0, got ", g.max_tokens);
  if (g.logprobs < 0 || g.logprobs > 20) throw_config_error("--logprobs must be between 0 and 20, got ", g.logprobs);
  g.sampling.seed = uint64_t(args.model.seed);
  g.sampling.num_logprobs = g.logprobs;
  Sampler check(g.sampling);  // validates the sampling parameters before the model loads
  std::vector<int32_t> prompt_ids;
  if (g.prompt_token_ids) prompt_ids = parse_ids(*g.prompt_token_ids);
  std::string prompt_text;
  if (g.prompt_file) {
    std::ifstream in(*g.prompt_file, std::ios::binary);
    if (!in) throw_config_error("Cannot read --prompt-file ", *g.prompt_file);
    std::stringstream ss;
    ss << in.rdbuf();
    prompt_text = ss.str();
  } else if (g.prompt) {
    prompt_text = *g.prompt;
  }
  if (g.chat.value_or(false) && g.prompt_token_ids)
    throw_config_error("--chat renders a text prompt through the chat template; --prompt-token-ids are sent as "
                       "they are (drop --chat)");
  const bool chat = g.chat.value_or(is_builtin_real_model(args.model.model) && !g.prompt_token_ids);
  if (!g.prompt && !g.prompt_file && !g.prompt_token_ids) prompt_text = chat ? "What is the capital of Japan?" : "Once upon a time";

  EngineSetup e = setup_engine(args, v);
  if (!g.prompt_token_ids) {
    if (!e.tokenizer) throw_config_error("this model has no tokenizer: give the prompt with --prompt-token-ids");
    if (chat) {
      if (e.tokenizer->chat_template().empty())
        throw_config_error("--chat: this model's tokenizer has no chat template; use --no-chat");
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      messages.push_back({{"role", "user"}, {"content", prompt_text}});
      // As vLLM's chat path: the template writes the special tokens, the tokenizer adds none.
      const std::string rendered = apply_chat_template(*e.tokenizer, messages, nullptr, true, nullptr);
      for (int id : e.tokenizer->encode(rendered, false)) prompt_ids.push_back(int32_t(id));
    } else {
      for (int id : e.tokenizer->encode(prompt_text, true)) prompt_ids.push_back(int32_t(id));
    }
  }
  GenerateRequest req;
  req.prompt_ids = prompt_ids;
  req.params.sampling = g.sampling;
  req.params.max_tokens = g.max_tokens;
  req.params.stop = g.stop;
  req.params.ignore_eos = g.ignore_eos;
  if (!e.tokenizer && !g.stop.empty()) throw_config_error("--stop needs a tokenizer");

  Engine engine(*e.runner, e.tokenizer, engine_options_from_args(args, e.max_model_len));
  GenerateStats st;
  const bool stream = !g.output_json;
  // A terminal gets the text with control characters replaced (model output must not drive it); a pipe or
  // file gets it exactly.
  const bool to_terminal = ::isatty(STDOUT_FILENO) == 1;
  // Streams the text as it comes, or the token ids without a tokenizer.
  auto on_output = [&](size_t, const RequestOutput& o) {
    if (!stream) return;
    if (e.tokenizer && to_terminal) {
      const std::string safe = terminal_safe(o.text_delta);
      std::fwrite(safe.data(), 1, safe.size(), stdout);
    } else if (e.tokenizer) std::fwrite(o.text_delta.data(), 1, o.text_delta.size(), stdout);
    else for (int32_t token : o.new_token_ids) std::printf("%d ", token);
    std::fflush(stdout);
  };
  auto outs = engine.generate({req}, on_output, &st);
  const GenerateResult& out = outs.front();
  if (g.output_json) {
    nlohmann::ordered_json j;
    j["prompt_token_ids"] = prompt_ids;
    j["token_ids"] = out.token_ids;
    j["text"] = out.text;
    if (g.logprobs > 0) {
      nlohmann::ordered_json lp = nlohmann::ordered_json::array();
      for (const auto& s : out.logprobs) {
        nlohmann::ordered_json pos = nlohmann::ordered_json::array();
        for (const auto& t : s.top) pos.push_back({{"token_id", t.id}, {"logprob", t.logprob}});
        lp.push_back(pos);
      }
      j["logprobs"] = lp;
    }
    j["finish_reason"] = finish_reason_str(out.finish_reason);
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);
  double decode_tps = st.decode_seconds > 0 ? double(st.generated_tokens - 1) / st.decode_seconds : 0.0;
  PAGODA_LOG_INFO("Prompt tokens: ", st.prompt_tokens, ", generated tokens: ", st.generated_tokens, " (",
                  finish_reason_str(out.finish_reason), "), ", st.total_seconds, " s, ",
                  st.total_seconds > 0 ? double(st.generated_tokens) / st.total_seconds : 0.0,
                  " tokens/s (prefill ", st.prefill_seconds > 0 ? double(st.prompt_tokens) / st.prefill_seconds : 0.0,
                  " tokens/s, decode ", decode_tps, " tokens/s)");
  return 0;
}

}  // namespace pagoda
