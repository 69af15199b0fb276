// Hugging Face folder -> LoadedModel: config.json, *.safetensors (one file or shards + index),
// tokenizer.json (+ tokenizer_config.json) or RWKV World's rwkv_vocab_v20230424.txt.
//
// The architecture (model/arch/) is found from config.json's "architectures"; it reads the hyperparameters
// and maps every HF tensor name to GGUF's, so the forward never sees the source format. A torch tensor
// [out, in] stored row-major is ggml ne = [in, out] over the same bytes, so the views point straight into
// the mapped shards (no copy) with the shape reversed. Q/K rows stay in HF's order: HF applies RoPE with
// rotate_half, which the config maps to RopeMode::NeoX (GGUF converters permute those rows instead and use
// the Normal mode; doing both would scramble the heads).
//
// Copies happen only where the layouts differ: a tensor whose bytes are not aligned to its element size
// (the safetensors layout does not promise it); MoE checkpoints that store one matrix per expert (stacked
// here into GGUF's [n_embd, n_ff, n_expert] ffn_*_exps) or transformers 5's fused [gate | up] expert stack
// (split into the two GGUF stacks); and whatever the architecture's hf_fixup derives (Llama-3 and LongRoPE
// factors as tensors, Gemma's norm weights). All such buffers live in LoadedModel::storage.
//
// An RWKV World vocabulary file (rwkv_vocab_v20230424.txt) is the tokenizer where the folder has one; without it
// or tokenizer.json the model still loads with an empty vocabulary (and a warning), because
// `gpu-accel logits` and the parity tools work on token ids; text commands then fail clearly.
// The architecture's own tensor check runs last; its messages use GGUF names, so errors are
// rethrown with the HF name added.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "core/log.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"
#include "model/arch/rope.h"
#include "model/formats/hf_config.h"
#include "model/formats/safetensors.h"
#include "model/loader/hf_fp8.h"

namespace ga {
namespace {

namespace fs = std::filesystem;

// Moves a buffer we had to create into LoadedModel::storage; views point at its bytes.
template <typename T>
const uint8_t* keep(LoadedModel& model, std::vector<T> data) {
  auto owned = std::make_shared<std::vector<T>>(std::move(data));
  model.storage.push_back(owned);
  return reinterpret_cast<const uint8_t*>(owned->data());
}

bool ignorable(std::string_view hf_name) {
  // Older checkpoints saved the rotary inverse frequencies as a buffer; we compute our own.
  return hf_name.ends_with("rotary_emb.inv_freq");
}

constexpr const char* kRwkvWorldVocab = "rwkv_vocab_v20230424.txt";

std::string folder_name(const fs::path& dir) {
  const fs::path p = dir.has_filename() ? dir : dir.parent_path();  // "models/x/" -> "x"
  return p.filename().string();
}

class HfLoader {
 public:
  HfLoader(const std::string& dir, const LoadOptions& options) : dir_(dir), options_(options) {}

  LoadedModel load() {
    GA_CHECK(fs::is_directory(dir_), Io, "'", dir_.string(), "' is not a folder");
    const fs::path config_path = dir_ / "config.json";
    GA_CHECK(fs::exists(config_path), InvalidFormat, "'", dir_.string(),
             "' has no config.json (not a Hugging Face model folder)");
    const hf::HfConfig hf = hf::read_config(config_path.string());
    arch_ = &arch::hf_arch_of(hf);
    fp8_ = hf::fp8_layout(hf);

    LoadedModel model;
    model.format = "safetensors";
    model.path = dir_.string();
    model.config = arch::config_from_hf(hf);
    if (model.config.name.empty()) model.config.name = folder_name(dir_);

    const safetensors::Checkpoint ckpt = safetensors::Checkpoint::open_dir(dir_.string());
    for (auto& s : ckpt.storages()) model.storage.push_back(std::move(s));
    add_weights(ckpt, model);
    add_rope_factors(model);
    if (arch_->hf_fixup) arch_->hf_fixup(hf, model);
    read_vocab(model);
    fill_metadata(hf, ckpt, model);
    check(model);
    return model;
  }

 private:
  // One HF tensor's bytes and shape (torch order), checked for a type we compute.
  struct Source {
    std::string hf_name;
    DType type = DType::F32;
    std::vector<uint64_t> shape;  // torch order
    const uint8_t* data = nullptr;
    uint64_t nbytes = 0;
  };

  // An FP8 weight (hf_fp8.h) stays FP8 as F8_B128 blocks where its scales allow, else is dequantized to F32, into
  // the model's storage.
  Source source(const safetensors::Checkpoint& ckpt, const std::string& hf_name, LoadedModel& model) const {
    const safetensors::TensorInfo& info = *ckpt.find(hf_name);
    if (fp8_ && info.dtype.starts_with("F8_")) {
      if (std::optional<std::vector<uint8_t>> blocks = hf::fp8_weight_blocks(ckpt, hf_name, *fp8_)) {
        const uint64_t nbytes = blocks->size();
        return Source{hf_name, DType::F8_B128, info.shape, keep(model, std::move(*blocks)), nbytes};
      }
      std::vector<float> values = hf::dequantize_fp8_weight(ckpt, hf_name, *fp8_);
      const uint64_t nbytes = values.size() * sizeof(float);
      return Source{hf_name, DType::F32, info.shape, keep(model, std::move(values)), nbytes};
    }
    GA_CHECK(info.type.has_value(), Unsupported, "'", ckpt.path_of(hf_name), "': tensor '", hf_name, "' has dtype ",
             info.dtype, "; gpu_accel reads F32, F16 and BF16 weights",
             info.dtype.starts_with("F8_") ? " (FP8 ones in checkpoints whose config.json says so)" : "");
    return Source{hf_name, *info.type, info.shape, ckpt.tensor_data(hf_name), info.nbytes()};
  }

  void check_layer(const safetensors::Checkpoint& ckpt, const std::string& hf_name, const std::string& name,
                   const ModelConfig& c) const {
    if (!name.starts_with("blk.")) return;
    // A layer past num_hidden_layers means config and weights disagree; the check below would not notice
    // an extra layer.
    const size_t end = name.find('.', 4);
    int64_t layer = 0;
    const auto [ptr, ec] = std::from_chars(name.data() + 4, name.data() + end, layer);
    const bool in_range = ec == std::errc() && ptr == name.data() + end && layer < c.n_layer;
    GA_CHECK(in_range, InvalidFormat, "'", ckpt.path_of(hf_name), "': tensor '", hf_name, "' is beyond the ",
             c.n_layer, " layers config.json's num_hidden_layers declares");
  }

  void add_weights(const safetensors::Checkpoint& ckpt, LoadedModel& model) {
    ModelConfig& c = model.config;
    std::vector<std::string> unknown;
    std::map<std::string, std::map<int64_t, Source>> experts;  // stack name -> expert -> its matrix
    for (const auto& [hf_name, entry] : ckpt.entries()) {
      if (fp8_ && hf::is_fp8_scale_name(hf_name)) continue;  // read with its weight
      const std::optional<arch::HfTensorName> mapped = arch_->hf_tensor_name(hf_name);
      if (!mapped) {
        const bool is_bias = std::string_view(hf_name).ends_with(".bias");
        // A bias we do not apply (o_proj, MLP) would silently change the results.
        GA_CHECK(!is_bias, Unsupported, "'", ckpt.path_of(hf_name), "': tensor '", hf_name, "' is a bias the ",
                 c.arch, " forward does not apply");
        if (!ignorable(hf_name)) unknown.push_back(hf_name);
        continue;
      }
      const std::string& name = mapped->gguf;
      if (name == "output.weight" && c.tied_embeddings) {
        GA_LOG(Debug, dir_.string(), ": lm_head.weight ignored (tie_word_embeddings is true)");
        continue;
      }
      check_layer(ckpt, hf_name, name, c);
      const Source src = source(ckpt, hf_name, model);
      if (mapped->expert >= 0) {
        GA_CHECK(experts[name].emplace(mapped->expert, src).second, InvalidFormat, "'", ckpt.path_of(hf_name),
                 "': expert ", mapped->expert, " of ", name, " appears twice");
        hf_names_[name] = hf_name;
        continue;
      }
      if (mapped->split_gate_up) {
        split_gate_up(src, name, mapped->gguf_up, model);
        continue;
      }
      WeightView w;
      w.name = name;
      w.type = src.type;
      w.ne.assign(src.shape.rbegin(), src.shape.rend());  // torch [out, in] -> ggml [in, out]
      if (w.ne.empty()) w.ne.push_back(1);                             // a 0-d tensor is one element
      w.nbytes = src.nbytes;
      w.data = src.data;
      // scalar types are read as arrays of their element; blocks (the FP8 ones made above) at any byte offset
      const uint64_t elem = traits(w.type).quantized ? 1 : traits(w.type).type_size;
      if (reinterpret_cast<uintptr_t>(w.data) % elem != 0) {
        w.data = keep(model, std::vector<uint8_t>(w.data, w.data + w.nbytes));  // new[] is max-aligned
      }
      hf_names_[name] = hf_name;
      model.weights.emplace(name, std::move(w));
    }
    for (const auto& [name, stack] : experts) stack_experts(ckpt, name, stack, model);
    if (!unknown.empty()) {
      std::string list;
      for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + unknown[i];
      GA_LOG(Warn, dir_.string(), ": ignoring ", unknown.size(), " tensor(s) the ", c.arch,
             " architecture does not use: ", list, unknown.size() > 5 ? ", ..." : "");
    }
    // (families whose classifier has GGUF's name; the others' tensor check names theirs, e.g. RWKV's head.weight)
    const std::vector<arch::TensorSpec> specs = arch_->tensor_specs(c);
    const bool has_output = std::any_of(specs.begin(), specs.end(), [](const arch::TensorSpec& s) {
      return s.name == "output.weight";
    });
    GA_CHECK(!has_output || c.tied_embeddings || model.find_weight("output.weight") != nullptr, InvalidFormat, "'",
             dir_.string(), "' has no lm_head.weight and config.json does not set tie_word_embeddings");
    // Some families always have q/k/v biases; for the others their presence decides (as in the GGUF loader).
    c.qkv_bias = c.qkv_bias || model.find_weight("blk.0.attn_q.bias") != nullptr;
  }

  // Per-expert [R][C] matrices -> one GGUF stack ne = [C, R, n_expert], experts in index order.
  void stack_experts(const safetensors::Checkpoint& ckpt, const std::string& name,
                     const std::map<int64_t, Source>& stack, LoadedModel& model) const {
    const int64_t n_expert = model.config.transformer.n_expert;
    const Source& first = stack.begin()->second;
    GA_CHECK(n_expert > 0 && static_cast<int64_t>(stack.size()) == n_expert && stack.begin()->first == 0 &&
                 stack.rbegin()->first == n_expert - 1,
             InvalidFormat, "'", dir_.string(), "': ", name, " has ", stack.size(), " experts (", first.hf_name,
             " ...), config.json declares ", n_expert);
    const std::vector<uint64_t>& shape = first.shape;
    GA_CHECK(shape.size() == 2, InvalidFormat, "'", ckpt.path_of(first.hf_name), "': expert tensor ", first.hf_name,
             " is not a matrix");
    const uint64_t bytes = first.nbytes;
    std::vector<uint8_t> data(bytes * static_cast<uint64_t>(n_expert));
    for (const auto& [e, src] : stack) {
      GA_CHECK(src.shape == shape && src.type == first.type, InvalidFormat, "'",
               ckpt.path_of(src.hf_name), "': expert tensor ", src.hf_name, " differs in shape or dtype from ",
               first.hf_name);
      std::memcpy(data.data() + static_cast<uint64_t>(e) * bytes, src.data, bytes);
    }
    WeightView w;
    w.name = name;
    w.type = first.type;
    w.ne = {shape[1], shape[0], static_cast<uint64_t>(n_expert)};
    w.nbytes = data.size();
    w.data = keep(model, std::move(data));
    model.weights.emplace(name, std::move(w));
  }

  // transformers 5's [n_expert][2 n_ff][n_embd] gate_up stack -> GGUF's gate and up stacks.
  void split_gate_up(const Source& src, const std::string& gate_name, const std::string& up_name,
                     LoadedModel& model) {
    const std::vector<uint64_t>& shape = src.shape;
    GA_CHECK(shape.size() == 3 && shape[1] % 2 == 0, InvalidFormat, "'", dir_.string(), "': tensor ", src.hf_name,
             " is not an [experts][2 ff][hidden] stack");
    const uint64_t elem = traits(src.type).type_size;
    const uint64_t n_expert = shape[0], ff = shape[1] / 2, cols = shape[2];
    const uint64_t half_bytes = ff * cols * elem;
    for (const auto& [name, offset] : {std::pair<std::string, uint64_t>{gate_name, 0}, {up_name, half_bytes}}) {
      std::vector<uint8_t> data(half_bytes * n_expert);
      for (uint64_t e = 0; e < n_expert; ++e) {
        std::memcpy(data.data() + e * half_bytes, src.data + e * 2 * half_bytes + offset, half_bytes);
      }
      WeightView w;
      w.name = name;
      w.type = src.type;
      w.ne = {cols, ff, n_expert};
      w.nbytes = data.size();
      w.data = keep(model, std::move(data));
      hf_names_[name] = src.hf_name;
      model.weights.emplace(name, std::move(w));
    }
  }

  void add_rope_factors(LoadedModel& model) {
    const ModelConfig& c = model.config;
    if (c.rope_scaling.type != RopeScalingType::Llama3) return;
    std::vector<float> factors = arch::llama3_rope_freq_factors(c);  // [n_rot/2]
    WeightView w;
    w.name = "rope_freqs.weight";
    w.type = DType::F32;
    w.ne = {static_cast<uint64_t>(factors.size())};
    w.nbytes = factors.size() * sizeof(float);
    w.data = keep(model, std::move(factors));
    const std::string key = w.name;
    model.weights.emplace(key, std::move(w));
  }

  void read_vocab(LoadedModel& model) const {
    const fs::path tokenizer = dir_ / "tokenizer.json";
    const fs::path tokenizer_config = dir_ / "tokenizer_config.json";
    const fs::path world = dir_ / kRwkvWorldVocab;
    if (fs::exists(world)) {
      // RWKV World folders (fla-hub's RWKV-7, RWKV-4/5/6 World conversions) ship BlinkDL's vocabulary file and a
      // Python tokenizer class (hf_rwkv_tokenizer.py, named by tokenizer_config.json's auto_map) that reads it,
      // with <|endoftext|> as id 0: what from_rwkv_world gives. That class is the folder's tokenizer even beside
      // a tokenizer.json (it has no fast counterpart), so the file wins.
      model.vocab = Vocab::from_rwkv_world(world.string());
      GA_CHECK(static_cast<int64_t>(model.vocab.tokens.size()) <= model.config.n_vocab, InvalidFormat, world.string(),
               " has ", model.vocab.tokens.size(), " tokens, more than config.json's vocab_size ", model.config.n_vocab);
      return;
    }
    if (!fs::exists(tokenizer)) {
      GA_LOG(Warn, dir_.string(), ": no tokenizer.json (nor ", kRwkvWorldVocab,
             "); the model loads without a vocabulary (token ids only)");
      return;
    }
    model.vocab = Vocab::from_hf_json(tokenizer.string(),
                                      fs::exists(tokenizer_config) ? tokenizer_config.string() : std::string());
    const auto n_tokens = static_cast<int64_t>(model.vocab.tokens.size());
    // HF pads vocab_size past the tokenizer (e.g. to a multiple of 64); the reverse is a mismatch.
    if (n_tokens > model.config.n_vocab) {
      GA_LOG(Warn, dir_.string(), ": tokenizer has ", n_tokens, " tokens but vocab_size is ", model.config.n_vocab);
    }
  }

  void fill_metadata(const hf::HfConfig& hf, const safetensors::Checkpoint& ckpt, LoadedModel& model) const {
    auto& md = model.metadata;
    md.push_back({"general.architecture", model.config.arch});
    md.push_back({"general.name", model.config.name});
    md.push_back({"hf.architecture", hf.architecture});
    md.push_back({"safetensors.files", std::to_string(ckpt.files().size())});
    md.push_back({"safetensors.tensors", std::to_string(ckpt.entries().size())});
    if (model.find_weight("rope_freqs.weight") != nullptr) {
      md.push_back({"rope_freqs.weight", "computed from config.json's llama3 rope scaling"});
    }
    for (const auto& file : ckpt.files()) {
      for (const auto& [key, value] : file.metadata()) {
        md.push_back({"safetensors." + fs::path(file.path()).filename().string() + "." + key, value});
      }
    }
    md.insert(md.end(), hf.entries.begin(), hf.entries.end());
  }

  void check(const LoadedModel& model) const {
    try {
      arch::check_model(model, options_.progress);
    } catch (const Error& e) {
      // Name the tensor as it appears in the folder, not only by its GGUF name.
      // The longest GGUF name found wins ("output.weight" is inside "blk.0.attn_output.weight").
      std::string hint;
      size_t best = 0;
      for (const auto& [gguf_name, hf_name] : hf_names_) {
        if (gguf_name.size() > best && e.message().find(gguf_name) != std::string::npos) {
          best = gguf_name.size();
          hint = " (" + hf_name + " in the safetensors files)";
        }
      }
      throw Error(e.kind(), "Hugging Face model '" + dir_.string() + "': " + e.message() + hint, e.file(), e.line());
    }
  }

  fs::path dir_;
  const LoadOptions& options_;
  const arch::ArchInfo* arch_ = nullptr;
  std::optional<hf::Fp8Layout> fp8_;  // the checkpoint's FP8 layout (hf_fp8.h); nullopt: not FP8
  std::map<std::string, std::string> hf_names_;  // GGUF name -> HF name of every mapped tensor
};

}  // namespace

LoadedModel load_hf_model(const std::string& dir, const LoadOptions& options) {
  return HfLoader(dir, options).load();
}

}  // namespace ga
