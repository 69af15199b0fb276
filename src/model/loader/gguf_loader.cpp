// GGUF -> LoadedModel: hyperparameters from `<arch>.*` keys, weight views into the mapping, the
// vocabulary from `tokenizer.*`, then the architecture's tensor check.
//
// The views point into the memory-mapped file (LoadedModel::storage keeps the mapping alive), so
// loading costs no copies. Defaults follow llama.cpp's for keys converters often leave out
// (head_count_kv = head_count, key_length = n_embd / n_head, rope.dimension_count = head_dim,
// rope.freq_base = 10000). Everything that would make the forward pass misbehave is checked here,
// before a Session exists, and reported with the key or tensor name.
#include <filesystem>

#include "core/log.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "model/arch/llama.h"

namespace ga {
namespace {

class HyperParams {
 public:
  HyperParams(const gguf::File& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  int64_t required_int(const std::string& suffix) const {
    const std::optional<int64_t> v = file_.get_int(key(suffix));
    GA_CHECK(v.has_value(), InvalidFormat, "gguf: missing key '", key(suffix), "'");
    return *v;
  }
  std::optional<int64_t> optional_int(const std::string& suffix) const { return file_.get_int(key(suffix)); }
  std::optional<double> optional_float(const std::string& suffix) const { return file_.get_float(key(suffix)); }
  std::optional<std::string> optional_string(const std::string& suffix) const {
    return file_.get_string(key(suffix));
  }
  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }

 private:
  const gguf::File& file_;
  std::string arch_;
};

void read_rope_scaling(const HyperParams& hp, ModelConfig& c) {
  const std::string type = hp.optional_string("rope.scaling.type").value_or("none");
  const std::optional<double> factor = hp.optional_float("rope.scaling.factor");
  const std::optional<double> scale_linear = hp.optional_float("rope.scale_linear");  // older converters
  if (type == "linear") {
    c.rope_scaling.type = RopeScalingType::Linear;
    c.rope_scaling.factor = static_cast<float>(factor.value_or(scale_linear.value_or(1.0)));
  } else if (type == "none") {
    if (scale_linear.has_value() && *scale_linear != 1.0) {
      c.rope_scaling.type = RopeScalingType::Linear;
      c.rope_scaling.factor = static_cast<float>(*scale_linear);
    }
  } else {
    GA_THROW(Unsupported, "gguf: rope scaling type '", type, "' (", hp.key("rope.scaling.type"),
             ") is not supported (supported: none, linear; Llama-3 scaling comes as rope_freqs.weight)");
  }
}

ModelConfig read_config(const gguf::File& file, const std::string& arch, const std::string& path) {
  const HyperParams hp(file, arch);
  ModelConfig c;
  c.arch = arch;
  c.name = file.get_string("general.name").value_or(std::filesystem::path(path).stem().string());
  c.n_ctx_train = hp.required_int("context_length");
  c.n_embd = hp.required_int("embedding_length");
  c.n_layer = hp.required_int("block_count");
  c.n_ff = hp.required_int("feed_forward_length");
  c.n_head = hp.required_int("attention.head_count");
  c.n_head_kv = hp.optional_int("attention.head_count_kv").value_or(c.n_head);
  GA_CHECK(c.n_head > 0 && c.n_embd > 0, InvalidFormat, "gguf: ", hp.key("attention.head_count"), " = ", c.n_head,
           ", ", hp.key("embedding_length"), " = ", c.n_embd, " must be positive");
  c.head_dim = hp.optional_int("attention.key_length").value_or(c.n_embd / c.n_head);
  const int64_t value_dim = hp.optional_int("attention.value_length").value_or(c.head_dim);
  GA_CHECK(value_dim == c.head_dim, Unsupported, "gguf: attention.value_length ", value_dim,
           " differs from attention.key_length ", c.head_dim);
  c.n_rot = hp.optional_int("rope.dimension_count").value_or(c.head_dim);
  c.rms_eps = static_cast<float>(hp.optional_float("attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_freq_base = static_cast<float>(hp.optional_float("rope.freq_base").value_or(10000.0));
  c.rope_mode = arch == "qwen2" ? RopeMode::NeoX : RopeMode::Normal;
  read_rope_scaling(hp, c);
  c.n_vocab = hp.optional_int("vocab_size").value_or(0);
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  c.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  return c;
}

}  // namespace

LoadedModel load_gguf_model(const std::string& path, const LoadOptions& options) {
  gguf::File file = gguf::File::open(path);
  const std::optional<std::string> arch_name = file.get_string("general.architecture");
  GA_CHECK(arch_name.has_value(), InvalidFormat, "gguf: '", path, "' has no general.architecture key");
  GA_CHECK(arch::is_llama_family(*arch_name), Unsupported, "unsupported architecture '", *arch_name,
           "' (supported: llama, qwen2)");

  LoadedModel model;
  model.format = "gguf";
  model.path = path;
  model.config = read_config(file, *arch_name, path);
  for (const gguf::KeyValue& kv : file.metadata()) model.metadata.push_back({kv.key, kv.value.to_string()});
  model.storage.push_back(file.storage());
  for (const gguf::TensorInfo& t : file.tensors()) {
    WeightView w;
    w.name = t.name;
    w.type = t.type;
    w.ne = t.ne;
    w.data = file.tensor_data(t);
    w.nbytes = t.nbytes;
    model.weights.emplace(t.name, std::move(w));
  }
  model.vocab = Vocab::from_gguf(file);

  // n_vocab: the explicit key, else the embedding's rows (what the forward pass can index; some
  // converters pad the embedding beyond the token list), else the tokenizer's size.
  ModelConfig& c = model.config;
  if (c.n_vocab == 0) {
    if (const WeightView* embd = model.find_weight("token_embd.weight")) c.n_vocab = embd->rows();
  }
  if (c.n_vocab == 0) c.n_vocab = static_cast<int64_t>(model.vocab.tokens.size());
  if (!model.vocab.tokens.empty() && static_cast<int64_t>(model.vocab.tokens.size()) != c.n_vocab) {
    GA_LOG(Warn, "model '", c.name, "': tokenizer has ", model.vocab.tokens.size(), " tokens but n_vocab is ",
           c.n_vocab);
  }
  arch::check_llama_model(model, options.progress);
  return model;
}

}  // namespace ga
