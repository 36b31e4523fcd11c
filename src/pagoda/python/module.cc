// pagoda._core: the Python bindings (pybind11) over OfflineLlm, the tokenizer and the configuration checks.
// Only translation lives here; python/pagoda/ builds vLLM's classes on top and _core.pyi describes this
// module for editors.
//
// Errors: pagoda::Error becomes ValueError for configuration errors (the CLI's exit status 2) and
// RuntimeError otherwise (exit status 1), with the CLI's text. The GIL is released while the engine starts
// and while it runs; between steps the batch loop takes it back at most every kPollInterval to run Python's
// signal handlers (Ctrl-C cancels the batch) and the progress callback. Log lines go to a Python callable
// (pagoda.logger), which hands them to the `pagoda` logger.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/config/attention_config.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/engine/embedder.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/model/gguf_model.h"
#include "pagoda/ops/quant/quant.h"
#include "pagoda/python/offline_llm.h"
#include "pagoda/tokenizer/gguf_vocab.h"

namespace py = pybind11;

namespace pagoda {
namespace {

// How often a running batch takes the GIL back: often enough that Ctrl-C and the progress bar feel
// immediate, rarely enough that a busy Python thread (which holds the GIL for up to its 5 ms switch
// interval whenever the engine asks for it) costs the engine at most a few percent.
constexpr auto kPollInterval = std::chrono::milliseconds(50);

// The Python callable that receives log lines: (levelno, file, line, message). Owned reference, read and
// written with the GIL held; nullptr: lines go to stderr in the CLI's format.
PyObject* g_log_forwarder = nullptr;

bool python_is_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

int python_level(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return 10;
    case LogLevel::kInfo: return 20;
    case LogLevel::kWarning: return 30;
    case LogLevel::kError: return 40;
  }
  return 20;
}

void write_stderr(LogLevel level, const char* file, int line, std::string_view message) {
  std::string text = format_log_line(level, file, line, message) + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// The log sink: any thread, outside the logging lock (core/logging.h), GIL not held on entry.
void forward_log(LogLevel level, const char* file, int line, std::string_view message) {
  if (!Py_IsInitialized() || python_is_finalizing()) {
    write_stderr(level, file, line, message);
    return;
  }
  py::gil_scoped_acquire gil;
  if (!g_log_forwarder) {
    write_stderr(level, file, line, message);
    return;
  }
  try {
    py::handle forwarder(g_log_forwarder);
    forwarder(python_level(level), file, line, py::str(message.data(), message.size()));
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("pagoda log forwarding");
  }
}

void set_log_forwarder(py::object forwarder) {
  PyObject* old = g_log_forwarder;
  g_log_forwarder = forwarder.is_none() ? nullptr : forwarder.release().ptr();
  Py_XDECREF(old);
}

py::object run_batch(OfflineLlm& llm, const std::vector<OfflineRequest>& requests, py::object progress) {
  std::optional<py::error_already_set> failure;  // a Python exception to re-raise (KeyboardInterrupt, ...)
  auto last = std::chrono::steady_clock::now();
  bool first = true;
  size_t reported = 0;
  OfflineLlm::Poll poll = [&](const OfflineProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool done = p.finished == p.total;
    if (!first && !done && now - last < kPollInterval) return true;
    last = now;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      failure.emplace();
      return false;
    }
    if (!progress.is_none() && (first || p.finished != reported)) {
      try {
        progress(p.finished, p.total, p.prompt_tokens, p.output_tokens, p.elapsed_s);
      } catch (py::error_already_set&) {
        failure.emplace();
        return false;
      }
      reported = p.finished;
    }
    first = false;
    return true;
  };
  std::optional<std::vector<OfflineResult>> results;
  {
    py::gil_scoped_release release;
    results = llm.generate(requests, poll);
  }
  if (failure) throw *failure;
  if (!results) throw std::logic_error("the batch was cancelled without a Python exception");
  return py::cast(std::move(*results));
}

// The block-quantized type named `name` ("Q4_K", as GGUF tools print it); ValueError for anything else.
QuantType quant_type_named(const std::string& name) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1, QuantType::kQ8_0,
                      QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K})
    if (quant_traits(t).name == name) return t;
  throw py::value_error("unknown quantized type '" + name + "' (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)");
}

// n must be a non-negative whole number of blocks of `t`.
void check_quant_count(QuantType t, int64_t n) {
  const QuantTraits tr = quant_traits(t);
  if (n < 0 || n % tr.block_elems != 0)
    throw py::value_error(str_cat(n, " is not a whole number of ", tr.name, " blocks (", tr.block_elems, " weights)"));
}

// dequantize(type_name, data, n): n weights from their blocks, as little-endian float32 bytes.
py::bytes dequantize_bytes(const std::string& type_name, const py::bytes& data, int64_t n) {
  const QuantType t = quant_type_named(type_name);
  check_quant_count(t, n);
  const std::string_view in = data;
  if (in.size() != quant_row_bytes(t, n))
    throw py::value_error(str_cat(n, " ", quant_traits(t).name, " weights take ", quant_row_bytes(t, n),
                                  " bytes, not ", in.size()));
  std::string out(size_t(n) * sizeof(float), '\0');
  dequantize_row(t, in.data(), reinterpret_cast<float*>(out.data()), n);
  return py::bytes(out);
}

// quantize(type_name, floats, n): n little-endian float32 values into blocks of `type_name`.
py::bytes quantize_bytes(const std::string& type_name, const py::bytes& floats, int64_t n) {
  const QuantType t = quant_type_named(type_name);
  check_quant_count(t, n);
  const std::string_view in = floats;
  if (in.size() != size_t(n) * sizeof(float))
    throw py::value_error(str_cat(n, " float32 values take ", size_t(n) * sizeof(float), " bytes, not ", in.size()));
  std::vector<float> x(static_cast<size_t>(n));
  if (n > 0) std::memcpy(x.data(), in.data(), in.size());
  for (float v : x)
    if (!std::isfinite(v)) throw py::value_error("quantize: the values must be finite");
  std::string out(quant_row_bytes(t, n), '\0');
  quantize_row(t, x.data(), out.data(), n);
  return py::bytes(out);
}

}  // namespace
}  // namespace pagoda

PYBIND11_MODULE(_core, m) {
  using namespace pagoda;
  m.doc() = "pagoda's C++ engine (see the pagoda package for the vLLM-style API)";
  m.attr("__version__") = PAGODA_VERSION;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(e.kind() == ErrorKind::kConfig ? PyExc_ValueError : PyExc_RuntimeError, e.what());
    }
  });

  set_log_sink(&forward_log);
  // Python's logging is configured per process: every line reaches the forwarder, which filters by the
  // `pagoda` logger's level (PAGODA_LOGGING_LEVEL, LLM(log_level=...) or logging's own setLevel).
  set_log_level(LogLevel::kDebug);
  m.def("set_log_forwarder", &set_log_forwarder, py::arg("forwarder"),
        "Sends log lines to forwarder(levelno, file, line, message); None: to stderr.");
  // Before the interpreter tears down modules, lines go back to stderr.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    set_log_forwarder(py::none());
  }));

  m.def("backend_names", [] {
    std::vector<std::string> names;
    for (BackendName b : kAllBackendNames) names.emplace_back(backend_name_str(b));
    return names;
  });
  m.def("parse_attention_config", [](const std::string& json) { return parse_attention_config_json(json).to_json(); },
        py::arg("json"), "Validates an AttentionConfig given as JSON (spec §9.2) and returns every field as JSON.");

  py::class_<EngineOptionInfo>(m, "EngineOption")
      .def_readonly("name", &EngineOptionInfo::name)
      .def_readonly("takes_value", &EngineOptionInfo::takes_value)
      .def_readonly("has_no_form", &EngineOptionInfo::has_no_form);
  m.def("engine_options", &offline_engine_options);
  m.def("dequantize", &dequantize_bytes, py::arg("type_name"), py::arg("data"), py::arg("n"),
        "n weights of a GGML block type (Q4_0 ... Q6_K) dequantized as ggml does, as float32 bytes.");
  m.def("quantize", &quantize_bytes, py::arg("type_name"), py::arg("floats"), py::arg("n"),
        "n float32 values (bytes) quantized into blocks of a GGML block type by pagoda's quantizer.");

  py::class_<OfflineEngineArgs>(m, "EngineArgs")
      .def(py::init([](const std::vector<std::string>& argv) {
             py::gil_scoped_release release;
             return parse_offline_engine_args(argv);
           }),
           py::arg("argv"))
      .def_property_readonly("model", [](const OfflineEngineArgs& a) { return a.args.model.model; })
      .def_property_readonly("seed", [](const OfflineEngineArgs& a) { return a.args.model.seed; })
      .def_property_readonly("log_level", [](const OfflineEngineArgs& a) { return a.args.device.log_level; });

  py::class_<OfflineRequest>(m, "Request")
      .def(py::init<>())
      .def_readwrite("prompt_ids", &OfflineRequest::prompt_ids)
      .def_readwrite("temperature", &OfflineRequest::temperature)
      .def_readwrite("top_k", &OfflineRequest::top_k)
      .def_readwrite("top_p", &OfflineRequest::top_p)
      .def_readwrite("min_p", &OfflineRequest::min_p)
      .def_readwrite("repetition_penalty", &OfflineRequest::repetition_penalty)
      .def_readwrite("presence_penalty", &OfflineRequest::presence_penalty)
      .def_readwrite("frequency_penalty", &OfflineRequest::frequency_penalty)
      .def_readwrite("seed", &OfflineRequest::seed)
      .def_readwrite("logprobs", &OfflineRequest::logprobs)
      .def_readwrite("max_tokens", &OfflineRequest::max_tokens)
      .def_readwrite("stop", &OfflineRequest::stop)
      .def_readwrite("stop_token_ids", &OfflineRequest::stop_token_ids)
      .def_readwrite("ignore_eos", &OfflineRequest::ignore_eos)
      .def_readwrite("skip_special_tokens", &OfflineRequest::skip_special_tokens)
      .def_readwrite("detokenize", &OfflineRequest::detokenize)
      .def("check", &check_offline_request, "Raises ValueError for sampling values the engine refuses.");

  py::class_<OfflineTokenLogprob>(m, "TokenLogprob")
      .def_readonly("token", &OfflineTokenLogprob::token)
      .def_readonly("logprob", &OfflineTokenLogprob::logprob)
      .def_readonly("top", &OfflineTokenLogprob::top);

  py::class_<OfflineResult>(m, "Result")
      .def_readonly("token_ids", &OfflineResult::token_ids)
      .def_property_readonly("text", [](const OfflineResult& r) {
        // The engine's text is valid UTF-8; "replace" keeps a Python str even if it were not.
        return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(r.text.data(), py::ssize_t(r.text.size()), "replace"));
      })
      .def_readonly("logprobs", &OfflineResult::logprobs)
      .def_readonly("finish_reason", &OfflineResult::finish_reason)
      .def_readonly("stop_string", &OfflineResult::stop_string)
      .def_readonly("stop_token_id", &OfflineResult::stop_token_id)
      .def_readonly("num_cached_tokens", &OfflineResult::num_cached_tokens)
      .def_readonly("queue_s", &OfflineResult::queue_s)
      .def_readonly("ttft_s", &OfflineResult::ttft_s)
      .def_readonly("e2e_s", &OfflineResult::e2e_s);

  py::class_<Tokenizer>(m, "Tokenizer")
      .def_static("from_file", [](const std::string& path) {
        py::gil_scoped_release release;
        return Tokenizer::from_file(path);
      })
      .def("encode",
           [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
             py::gil_scoped_release release;
             return t.encode(text, add_special_tokens);
           },
           py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode",
           [](const Tokenizer& t, const std::vector<int>& ids, bool skip_special_tokens) {
             std::string s;
             {
               py::gil_scoped_release release;
               s = t.decode(ids, skip_special_tokens);
             }
             return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), py::ssize_t(s.size()), "replace"));
           },
           py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def("render_chat",
           [](const Tokenizer& t, const std::string& chat_template, const std::string& messages_json,
              const std::string& tools_json, bool add_generation_prompt, const std::string& kwargs_json) {
             py::gil_scoped_release release;
             return render_chat(t, chat_template, messages_json, tools_json, add_generation_prompt, kwargs_json);
           },
           py::arg("chat_template"), py::arg("messages_json"), py::arg("tools_json"), py::arg("add_generation_prompt"),
           py::arg("kwargs_json"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_ids", &Tokenizer::eos_ids)
      .def_property_readonly("bos_token", &Tokenizer::bos_token)
      .def_property_readonly("eos_token", &Tokenizer::eos_token)
      .def_property_readonly("chat_template", &Tokenizer::chat_template)
      .def("token_to_id", &Tokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", &Tokenizer::id_to_token, py::arg("id"))
      .def("is_special", &Tokenizer::is_special, py::arg("id"));

  // The tokenizer of a GGUF file (tokenizer.ggml.* metadata), as the engine builds it for a GGUF model.
  m.def(
      "tokenizer_from_gguf",
      [](const std::string& path) {
        py::gil_scoped_release release;
        auto file = GgufFile::open(path);
        std::optional<GgufVocab> vocab = read_gguf_vocab(*file);
        if (!vocab) throw_config_error("GGUF file '", path, "' has no tokenizer (no tokenizer.ggml.tokens)");
        return tokenizer_from_gguf_vocab(*vocab);
      },
      py::arg("path"));
  // The file of a built-in real model (smollm2:135m) in pagoda's model cache; ValueError with the command
  // that fetches it when it is missing.
  m.def("builtin_model_file", [](const std::string& name) {
    if (!is_builtin_real_model(name)) throw_config_error("'", name, "' is not a built-in model (", kDefaultModel, ")");
    return builtin_model_file(name).string();
  }, py::arg("name") = std::string(kDefaultModel));

  // An encoder model's folder: `model` itself or its name in pagoda's model cache; None for other models.
  m.def("embedding_model_folder", [](const std::string& model) -> std::optional<std::string> {
    const std::optional<std::filesystem::path> p = find_embedding_model(model);
    return p ? std::optional<std::string>(p->string()) : std::nullopt;
  }, py::arg("model"));

  // Sentence embeddings of an encoder model (engine/embedder.h); LLM.embed() runs on it.
  py::class_<Embedder>(m, "Embedder")
      .def(py::init([](const std::string& folder, int threads) {
             py::gil_scoped_release release;
             return std::make_unique<Embedder>(folder, threads);
           }),
           py::arg("folder"), py::arg("threads") = 0)
      .def(py::init([](const std::string& folder, const OfflineEngineArgs& args) {
             py::gil_scoped_release release;
             return std::make_unique<Embedder>(folder, embedder_options_from_args(args.args, args.validated));
           }),
           py::arg("folder"), py::arg("args"))
      .def("tokenize", &Embedder::tokenize, py::arg("text"))
      .def("embed", [](Embedder& e, const std::vector<std::vector<int>>& seqs) {
             py::gil_scoped_release release;
             return e.embed(seqs);
           }, py::arg("sequences"))
      .def_property_readonly("dimensions", &Embedder::dimensions)
      .def_property_readonly("max_tokens", [](const Embedder& e) { return e.max_tokens(); })
      .def_property_readonly("attention_backend", [](const Embedder& e) { return e.encoder().attention_backend(); })
      .def_property_readonly("tokenizer", [](const Embedder& e) { return e.tokenizer(); });

  py::class_<OfflineLlm>(m, "Engine")
      .def(py::init([](const OfflineEngineArgs& args) {
             py::gil_scoped_release release;
             return std::make_unique<OfflineLlm>(args);
           }),
           py::arg("args"))
      .def("generate", &run_batch, py::arg("requests"), py::arg("progress") = py::none(),
           "Runs the requests to completion; progress(finished, total, prompt_tokens, output_tokens, seconds).")
      .def_property_readonly("tokenizer", [](const OfflineLlm& l) { return l.tokenizer(); })
      .def_property_readonly("model", &OfflineLlm::model)
      .def_property_readonly("max_model_len", &OfflineLlm::max_model_len)
      .def_property_readonly("device", &OfflineLlm::device)
      .def_property_readonly("dtype", &OfflineLlm::dtype)
      .def_property_readonly("kv_cache_dtype", &OfflineLlm::kv_cache_dtype)
      .def_property_readonly("block_size", &OfflineLlm::block_size)
      .def_property_readonly("attention_backends", &OfflineLlm::attention_backends);
}
