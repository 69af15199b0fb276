// Architectures: one registration table, and what each entry declares.
//
// An architecture (DESIGN.md, "Architectures own their sequence state") is one unit: how its
// hyperparameters are read (GGUF keys as llama.cpp's convert_hf_to_gguf.py writes them; Hugging Face
// config.json), how a Hugging Face checkpoint's tensor names map to GGUF's, which tensors it needs (names,
// shapes; checked at load time so a bad file fails with the tensor's name), its per-sequence state and its
// forward, written once against the step op vocabulary (backends/step_ops.h) and run by every backend.
// Loaders, the runtime and the apps find an architecture here by name and never branch on names
// themselves; adding one means its own file and one line in registry.cpp. docs/architecture.md walks
// through the families as examples.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/step_ops.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "model/arch/tensor_parallel.h"
#include "model/formats/hf_config.h"

namespace ga::arch {

// One tensor the architecture reads. ne in ggml order.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  bool required = true;
};

// A Hugging Face tensor's place in the GGUF naming. Most map one to one; per-expert matrices of a MoE
// checkpoint (model.layers.N.mlp.experts.E.gate_proj.weight) name their stack and their expert, and the
// loader stacks them; a fused [gate | up] expert tensor (transformers 5's experts.gate_up_proj) is split.
struct HfTensorName {
  std::string gguf;       // the GGUF name (of the stack, for an expert's matrix)
  int64_t expert = -1;    // >= 0: this tensor is expert `expert` of the stack
  bool split_gate_up = false;  // [n_expert][2 n_ff][n_embd]: rows [0, n_ff) -> gguf, the rest -> gguf_up
  std::string gguf_up;
};

// Reading GGUF keys `<arch>.<suffix>` (llama.cpp's names), with the key in every error message.
class GgufKeys {
 public:
  GgufKeys(const gguf::File& file, std::string arch) : file_(file), arch_(std::move(arch)) {}
  int64_t required_int(const std::string& suffix) const;
  std::optional<int64_t> optional_int(const std::string& suffix) const { return file_.get_int(key(suffix)); }
  std::optional<double> optional_float(const std::string& suffix) const { return file_.get_float(key(suffix)); }
  std::optional<std::string> optional_string(const std::string& suffix) const {
    return file_.get_string(key(suffix));
  }
  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }
  const gguf::File& file() const { return file_; }
  bool has_tensor(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

 private:
  const gguf::File& file_;
  std::string arch_;
};

struct ArchInfo {
  std::string_view name;                    // GGUF general.architecture
  std::vector<std::string_view> hf_classes;  // config.json "architectures" entries it reads
  std::vector<std::string_view> hf_model_types;  // config.json "model_type" for configs without architectures
  // The family's GGUF keys beyond the common ones (read_gguf_common has filled those).
  std::function<void(const GgufKeys&, ModelConfig&)> read_gguf;
  // The inverse: every `<arch>.*` key a GGUF of this config needs (make-model's random models).
  std::function<void(const ModelConfig&, gguf::Writer&)> write_gguf;
  // config.json -> the whole ModelConfig (the family calls read_hf_common with its defaults).
  std::function<void(const hf::HfConfig&, ModelConfig&)> read_hf;
  std::function<std::optional<HfTensorName>(std::string_view hf_name)> hf_tensor_name;
  // After the tensors are mapped: what a checkpoint stores differently from GGUF (Gemma's (1 + w) norm
  // weights, RoPE factors HF derives from the config). May add tensors to model.storage.
  std::function<void(const hf::HfConfig&, LoadedModel&)> hf_fixup;
  // After a GGUF's tensors are viewed: what the file names or lays out differently from what the forward binds
  // (RWKV: llama.cpp's blk.N.time_mix_* names, fused lerp stacks). Empty: the GGUF names are the forward's.
  std::function<void(LoadedModel&)> gguf_fixup;
  std::function<std::vector<TensorSpec>(const ModelConfig&)> tensor_specs;
  // The tensors of a GGUF of this config as llama.cpp's converter writes them (names, shapes, order), when they
  // differ from tensor_specs (which names what the forward binds); make-model writes these. Empty: tensor_specs.
  std::function<std::vector<TensorSpec>(const ModelConfig&)> gguf_tensor_specs;
  std::function<void(const ModelConfig&)> check_config;  // hyperparameters the forward cannot take
  // How each tensor splits over a tensor-parallel group (tensor_parallel.h); empty: the architecture does not.
  std::function<TensorSplit(const ModelConfig&, std::string_view name)> tensor_split;
  std::function<std::unique_ptr<step::ProgramFactory>(const LoadedModel&)> make_factory;
};

// The registration table (registry.cpp).
const std::vector<ArchInfo>& architectures();
const ArchInfo* find_arch(std::string_view gguf_name);
const ArchInfo* find_hf_arch(std::string_view hf_class);
const ArchInfo* find_hf_model_type(std::string_view model_type);
std::string supported_arch_names();      // "llama, qwen2, ..." for error messages
std::string supported_hf_class_names();  // "LlamaForCausalLM, ..." for error messages

// The architecture of a loaded model; Unsupported naming it when it is not registered.
const ArchInfo& arch_of(const ModelConfig& config);

// Checks the hyperparameters and that every tensor of the architecture's specs exists (when required)
// with that shape and a type gpu_accel supports. Throws InvalidFormat or Unsupported naming the problem.
// progress(done, total) is called per tensor with the bytes checked so far (may be empty).
void check_model(const LoadedModel& model, const std::function<void(uint64_t, uint64_t)>& progress = {});
// The tensor part of check_model, against any list (a format's own names, before a fixup renames them).
void check_tensors(const LoadedModel& model, const std::vector<TensorSpec>& specs,
                   const std::function<void(uint64_t, uint64_t)>& progress = {});

// The hyperparameters of a GGUF file (general.architecture picks the family) or of a config.json (its
// "architectures" list, else model_type). Unsupported, one line naming the architecture, when none matches.
ModelConfig config_from_gguf(const gguf::File& file, const std::string& path);
ModelConfig config_from_hf(const hf::HfConfig& config);
const ArchInfo& hf_arch_of(const hf::HfConfig& config);

// The forward of a loaded model, for any backend.
std::unique_ptr<step::ProgramFactory> make_program_factory(const LoadedModel& model);

}  // namespace ga::arch
