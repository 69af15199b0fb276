// gpu_accel._C.Engine: one loaded model, its tokenizer and chat format, and one Session (one sequence's state).
// The Python class gpu_accel.LLM wraps it (argument defaults, streaming, chat messages as dicts).
//
// Every method that runs the model releases the GIL; a mutex serializes the calls on one Engine (a streaming
// generation runs on a Python thread while the caller may call another method). The text callback of
// generate() takes the GIL back for each piece.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "gpu_accel/chat.h"
#include "gpu_accel/error.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/model.h"
#include "gpu_accel/precision.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace py = pybind11;

namespace ga::python {

namespace {

// Token text may split a UTF-8 sequence (a piece of a multi-byte character): such bytes become U+FFFD.
py::str utf8_text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

struct SamplingArgs {
  int64_t max_tokens = 128;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// The CLI's checks (apps/cli/generation_args.cpp), as ValueErrors naming the Python argument.
GenerateOptions generate_options(const SamplingArgs& a) {
  const auto require = [](bool ok, const std::string& message) {
    if (!ok) throw py::value_error(message);
  };
  require(a.max_tokens >= -1,
          "max_tokens must be -1 (until the context is full) or >= 0, got " + std::to_string(a.max_tokens));
  require(a.temperature >= 0.0f, "temperature must be >= 0 (0: greedy), got " + std::to_string(a.temperature));
  require(a.top_k >= 0, "top_k must be >= 0 (0: off), got " + std::to_string(a.top_k));
  require(a.top_p >= 0.0f && a.top_p <= 1.0f, "top_p must be in [0, 1], got " + std::to_string(a.top_p));
  require(a.min_p >= 0.0f && a.min_p <= 1.0f, "min_p must be in [0, 1], got " + std::to_string(a.min_p));
  require(a.repeat_penalty > 0.0f, "repeat_penalty must be > 0 (1: off), got " + std::to_string(a.repeat_penalty));
  require(a.repeat_last_n >= -1, "repeat_last_n must be >= -1 (-1: all), got " + std::to_string(a.repeat_last_n));
  for (const auto& s : a.stop) require(!s.empty(), "stop strings must be non-empty");
  GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.sampling.temperature = a.temperature;
  o.sampling.top_k = a.top_k;
  o.sampling.top_p = a.top_p;
  o.sampling.min_p = a.min_p;
  o.sampling.repeat_penalty = a.repeat_penalty;
  o.sampling.repeat_last_n = a.repeat_last_n;
  o.sampling.frequency_penalty = a.frequency_penalty;
  o.sampling.presence_penalty = a.presence_penalty;
  o.sampling.seed = a.seed;
  o.stop = a.stop;
  o.ignore_eos = a.ignore_eos;
  return o;
}

class Engine {
 public:
  Engine(const std::string& path, const std::string& device, int64_t n_ctx, int n_threads, bool warm_up,
         int tensor_parallel, int context_parallel, const std::string& precision, const std::string& precision_keep,
         const std::string& kv_type) {
    if (!(device == "cpu" || device == "cuda" || device == "auto" || device.rfind("cuda:", 0) == 0)) {
      throw py::value_error("device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got '" + device + "'");
    }
    if (n_ctx < 0) throw py::value_error("n_ctx must be >= 0 (0: the model's context), got " + std::to_string(n_ctx));
    if (n_threads < 0) throw py::value_error("threads must be >= 0 (0: all cores), got " + std::to_string(n_threads));
    if (tensor_parallel < 1) {
      throw py::value_error("tensor_parallel must be >= 1, got " + std::to_string(tensor_parallel));
    }
    if (context_parallel < 1) {
      throw py::value_error("context_parallel must be >= 1, got " + std::to_string(context_parallel));
    }
    // the CLI's --precision / --precision-keep (gpu_accel/precision.h); errors name the keyword
    PrecisionOptions precision_options;
    const auto named = [](const char* keyword, auto&& fn) {
      try {
        fn();
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::InvalidArgument) throw;
        throw Error(ErrorKind::InvalidArgument, std::string(keyword) + ": " + e.message());
      }
    };
    named("precision", [&] { precision_options.mode = precision_from_name(precision); });
    named("precision_keep", [&] { precision_options.keep_layers = parse_layer_list(precision_keep); });
    // the CLI's --kv-type: "" is the device's default (f32 on the CPU, f16 on a GPU)
    KvType kv = KvType::F32;
    if (!kv_type.empty()) {
      const std::optional<KvType> t = kv_type_from_name(kv_type);
      if (!t) {
        throw py::value_error("kv_type: unknown KV cache type '" + kv_type + "' (choices: " + kKvTypeChoices + ")");
      }
      if (*t == KvType::F32 && device.rfind("cuda", 0) == 0) {
        throw py::value_error("kv_type 'f32' on " + device + ": the GPU keeps its KV cache in f16 or fp8");
      }
      kv = *t;
    }
    py::gil_scoped_release release;
    model_ = std::make_unique<LoadedModel>(load_model(path));
    named("precision_keep", [&] { apply_precision(*model_, precision_options, precision_target(device)); });
    tokenizer_ = std::make_unique<Tokenizer>(model_->vocab);
    SessionOptions options;
    options.device = device;
    options.n_ctx = n_ctx;
    options.n_threads = n_threads;
    options.tensor_parallel = tensor_parallel;
    options.context_parallel = context_parallel;
    options.kv_type = kv;
    session_ = std::make_unique<Session>(*model_, options);
    if (warm_up) session_->warm_up();
  }

  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const {
    return tokenizer_->encode(text, add_special, parse_special);
  }

  py::str detokenize(const std::vector<int32_t>& ids, bool render_special) const {
    for (const int32_t id : ids) check_token(id);
    return utf8_text(tokenizer_->decode(ids, render_special));
  }

  py::str token_to_piece(int32_t id, bool render_special) const {
    check_token(id);
    return utf8_text(tokenizer_->token_to_piece(id, render_special));
  }

  // The tokens evaluated as a new sequence (positions 0 .. n-1): every row ([n, n_vocab]) or the last ([n_vocab]).
  py::array_t<float> logits(const std::vector<int32_t>& tokens, bool last_only) {
    if (tokens.empty()) throw py::value_error("logits: tokens must not be empty");
    for (const int32_t id : tokens) check_token(id);
    std::vector<float> rows;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      session_->reset();
      rows = session_->eval(tokens, !last_only);
      session_->reset();
    }
    const auto n_vocab = static_cast<py::ssize_t>(tokenizer_->n_vocab());
    const auto n_rows = static_cast<py::ssize_t>(rows.size()) / n_vocab;
    const std::vector<py::ssize_t> shape =
        last_only ? std::vector<py::ssize_t>{n_vocab} : std::vector<py::ssize_t>{n_rows, n_vocab};
    py::array_t<float> out(shape);
    std::memcpy(out.mutable_data(), rows.data(), rows.size() * sizeof(float));
    return out;
  }

  // A prompt given as text (tokenized with BOS as the vocab says) or as token ids; the chat variant renders the
  // messages with the model's chat template first. on_text(piece) -> bool (false cancels) receives the text as
  // it becomes final. Returns (text, finish reason, prompt tokens, generated tokens).
  py::tuple generate_text(const std::string& prompt, const SamplingArgs& args, bool add_special, bool parse_special,
                          const std::function<bool(const std::string&)>& on_text) {
    GenerateOptions options = generate_options(args);
    options.add_special = add_special;
    options.parse_special = parse_special;
    return run(
        [&](const std::function<bool(std::string_view)>& cb) {
          return generate(*session_, *tokenizer_, prompt, options, cb);
        },
        on_text);
  }

  py::tuple generate_tokens(const std::vector<int32_t>& prompt, const SamplingArgs& args,
                            const std::function<bool(const std::string&)>& on_text) {
    for (const int32_t id : prompt) check_token(id);
    const GenerateOptions options = generate_options(args);
    return run(
        [&](const std::function<bool(std::string_view)>& cb) {
          return generate_from_tokens(*session_, *tokenizer_, prompt, options, cb);
        },
        on_text);
  }

  std::vector<int32_t> chat_tokens(const std::vector<std::pair<std::string, std::string>>& messages) {
    std::vector<ChatMessage> m;
    for (const auto& [role, content] : messages) m.push_back({role, content});
    return chat_format().tokens(m);
  }

  py::str chat_prompt(const std::vector<std::pair<std::string, std::string>>& messages) {
    std::vector<ChatMessage> m;
    for (const auto& [role, content] : messages) m.push_back({role, content});
    return utf8_text(chat_format().render(m));
  }

  py::dict info() const {
    py::dict d;
    const ModelConfig& c = model_->config;
    d["path"] = model_->path;
    d["format"] = model_->format;
    d["arch"] = c.arch;
    d["name"] = c.name;
    d["n_vocab"] = tokenizer_->n_vocab();
    d["n_embd"] = c.n_embd;
    d["n_layer"] = c.n_layer;
    d["n_head"] = c.n_head;
    d["n_head_kv"] = c.n_head_kv;
    d["n_ctx_train"] = c.n_ctx_train;
    d["n_ctx"] = session_->n_ctx();
    d["device"] = session_->device();
    d["device_description"] = session_->device_description();
    d["kv_type"] = kv_type_name(session_->kv_type());
    d["precision"] = model_->precision.mode;
    d["precision_detail"] = model_->precision.detail;
    d["n_threads"] = session_->n_threads();
    d["bos"] = tokenizer_->bos();
    d["eos"] = tokenizer_->eos();
    d["has_chat_template"] = !model_->vocab.chat_template.empty();
    return d;
  }

 private:
  template <typename Fn>
  py::tuple run(const Fn& fn, const std::function<bool(const std::string&)>& on_text) {
    GenerateResult r;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      session_->reset();
      // Each piece also runs the pending signal handlers (on the main thread), so Ctrl-C stops a long generation:
      // the KeyboardInterrupt propagates as error_already_set, as does an exception of on_text.
      const std::function<bool(std::string_view)> cb = [&on_text](std::string_view piece) {
        py::gil_scoped_acquire acquire;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        return on_text ? on_text(std::string(piece)) : true;
      };
      r = fn(cb);
    }
    return py::make_tuple(utf8_text(r.text), finish_reason_name(r.finish), r.prompt_tokens, r.tokens);
  }

  void check_token(int32_t id) const {
    if (id < 0 || id >= tokenizer_->n_vocab()) {
      throw py::value_error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(tokenizer_->n_vocab()) + ")");
    }
  }

  const ChatFormat& chat_format() {
    if (!chat_) chat_ = std::make_unique<ChatFormat>(*tokenizer_);
    return *chat_;
  }

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<ChatFormat> chat_;
  std::mutex mutex_;
};

}  // namespace

void register_engine(py::module_& m) {
  py::class_<SamplingArgs>(m, "SamplingArgs", "Generation options (gpu_accel.LLM fills them from keywords).")
      .def(py::init<>())
      .def_readwrite("max_tokens", &SamplingArgs::max_tokens)
      .def_readwrite("temperature", &SamplingArgs::temperature)
      .def_readwrite("top_k", &SamplingArgs::top_k)
      .def_readwrite("top_p", &SamplingArgs::top_p)
      .def_readwrite("min_p", &SamplingArgs::min_p)
      .def_readwrite("repeat_penalty", &SamplingArgs::repeat_penalty)
      .def_readwrite("repeat_last_n", &SamplingArgs::repeat_last_n)
      .def_readwrite("frequency_penalty", &SamplingArgs::frequency_penalty)
      .def_readwrite("presence_penalty", &SamplingArgs::presence_penalty)
      .def_readwrite("seed", &SamplingArgs::seed)
      .def_readwrite("stop", &SamplingArgs::stop)
      .def_readwrite("ignore_eos", &SamplingArgs::ignore_eos);

  py::class_<Engine>(m, "Engine", "A loaded model with one sequence's session (use gpu_accel.LLM).")
      .def(py::init<const std::string&, const std::string&, int64_t, int, bool, int, int, const std::string&,
                    const std::string&, const std::string&>(),
           py::arg("path"), py::arg("device"), py::arg("n_ctx"), py::arg("threads"), py::arg("warm_up"),
           py::arg("tensor_parallel"), py::arg("context_parallel"), py::arg("precision"), py::arg("precision_keep"),
           py::arg("kv_type"))
      .def("tokenize", &Engine::tokenize, py::arg("text"), py::arg("add_special"), py::arg("parse_special"))
      .def("detokenize", &Engine::detokenize, py::arg("ids"), py::arg("render_special"))
      .def("token_to_piece", &Engine::token_to_piece, py::arg("id"), py::arg("render_special"))
      .def("logits", &Engine::logits, py::arg("tokens"), py::arg("last_only"))
      .def("generate_text", &Engine::generate_text, py::arg("prompt"), py::arg("args"), py::arg("add_special"),
           py::arg("parse_special"), py::arg("on_text"))
      .def("generate_tokens", &Engine::generate_tokens, py::arg("prompt"), py::arg("args"), py::arg("on_text"))
      .def("chat_tokens", &Engine::chat_tokens, py::arg("messages"))
      .def("chat_prompt", &Engine::chat_prompt, py::arg("messages"))
      .def("info", &Engine::info);
}

}  // namespace ga::python
