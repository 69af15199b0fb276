// GGUF -> LoadedModel: hyperparameters from `<arch>.*` keys (the architecture's reader, model/arch/), weight
// views into the mapping, the vocabulary from `tokenizer.*`, then the architecture's tensor check.
//
// The views point into the memory-mapped file (LoadedModel::storage keeps the mapping alive), so loading
// costs no copies. Everything that would make the forward pass misbehave is checked here, before a Session
// exists, and reported with the key or tensor name.
#include <filesystem>

#include "core/log.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"

namespace ga {

LoadedModel load_gguf_model(const std::string& path, const LoadOptions& options) {
  gguf::File file = gguf::File::open(path);
  LoadedModel model;
  model.format = "gguf";
  model.path = path;
  model.config = arch::config_from_gguf(file, path);
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
  const arch::ArchInfo& family = arch::arch_of(c);
  if (family.gguf_fixup) family.gguf_fixup(model);  // e.g. RWKV: llama.cpp's names -> the forward's
  arch::check_model(model, options.progress);
  return model;
}

}  // namespace ga
