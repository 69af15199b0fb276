// The registration table of architectures and the checks every loader runs (see architecture.h).
//
// Checking happens once, at load time, for every format: the forward then trusts shapes and types and never
// re-validates per token. Messages name the tensor and both shapes, because the usual cause is a converter
// or quantizer bug that only the tensor name makes findable.
#include <algorithm>
#include <filesystem>

#include "gpu_accel/error.h"
#include "model/arch/architecture.h"
#include "model/arch/decoder.h"
#include "model/arch/families.h"

namespace ga::arch {
namespace {

// ggml shapes: trailing dimensions of 1 change nothing ([64, 1] is a [64] vector; converters write either).
std::vector<uint64_t> trimmed(std::vector<uint64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

std::string shape_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::vector<ArchInfo> build_table() {
  std::vector<ArchInfo> table;
  for (std::vector<ArchInfo> family : {llama_family(), qwen_family(), gemma_family(), phi3_family(), rwkv_family()}) {
    for (ArchInfo& a : family) table.push_back(std::move(a));
  }
  return table;
}

template <typename Pred>
std::string join_names(Pred pick) {
  std::string out;
  for (const ArchInfo& a : architectures()) {
    for (const std::string_view n : pick(a)) out += (out.empty() ? "" : ", ") + std::string(n);
  }
  return out;
}

}  // namespace

ArchInfo decoder_arch(std::string_view name) {
  ArchInfo a;
  a.name = name;
  a.tensor_specs = decoder_tensor_specs;
  a.check_config = check_decoder_config;
  a.make_factory = make_decoder_factory;
  a.tensor_split = decoder_tensor_split;
  return a;
}

const std::vector<ArchInfo>& architectures() {
  static const std::vector<ArchInfo> table = build_table();
  return table;
}

const ArchInfo* find_arch(std::string_view gguf_name) {
  for (const ArchInfo& a : architectures()) {
    if (a.name == gguf_name && a.read_gguf) return &a;
  }
  return nullptr;
}

const ArchInfo* find_hf_arch(std::string_view hf_class) {
  for (const ArchInfo& a : architectures()) {
    if (std::find(a.hf_classes.begin(), a.hf_classes.end(), hf_class) != a.hf_classes.end()) return &a;
  }
  return nullptr;
}

const ArchInfo* find_hf_model_type(std::string_view model_type) {
  for (const ArchInfo& a : architectures()) {
    if (std::find(a.hf_model_types.begin(), a.hf_model_types.end(), model_type) != a.hf_model_types.end()) return &a;
  }
  return nullptr;
}

std::string supported_arch_names() {
  std::string out;
  for (const ArchInfo& a : architectures()) {
    if (a.read_gguf) out += (out.empty() ? "" : ", ") + std::string(a.name);
  }
  return out;
}

std::string supported_hf_class_names() {
  return join_names([](const ArchInfo& a) {
    // the entries that only refuse (a read_gguf-less alias) are not "supported"
    return a.read_gguf ? a.hf_classes : std::vector<std::string_view>{};
  });
}

const ArchInfo& arch_of(const ModelConfig& config) {
  const ArchInfo* a = find_arch(config.arch);
  GA_CHECK(a != nullptr, Unsupported, "unsupported architecture '", config.arch, "' (supported: ",
           supported_arch_names(), ")");
  return *a;
}

void check_model(const LoadedModel& model, const std::function<void(uint64_t, uint64_t)>& progress) {
  const ArchInfo& arch = arch_of(model.config);
  arch.check_config(model.config);
  check_tensors(model, arch.tensor_specs(model.config), progress);
}

void check_tensors(const LoadedModel& model, const std::vector<TensorSpec>& specs,
                   const std::function<void(uint64_t, uint64_t)>& progress) {
  uint64_t total = 0;
  for (const TensorSpec& s : specs) {
    if (const WeightView* w = model.find_weight(s.name)) total += w->nbytes;
  }
  uint64_t done = 0;
  for (const TensorSpec& s : specs) {
    const WeightView* w = model.find_weight(s.name);
    if (w == nullptr) {
      GA_CHECK(!s.required, InvalidFormat, "model is missing tensor ", s.name, " (expected shape ", shape_str(s.ne),
               ")");
      continue;
    }
    GA_CHECK(trimmed(w->ne) == trimmed(s.ne), InvalidFormat, "tensor ", s.name, " has shape ", shape_str(w->ne), ", expected ",
             shape_str(s.ne));
    const DTypeTraits& t = traits(w->type);
    GA_CHECK(t.supported, Unsupported, "tensor ", s.name, " has type ", t.name, ", which gpu_accel does not support");
    GA_CHECK(s.ne[0] % t.block_size == 0, InvalidFormat, "tensor ", s.name, " has rows of ", s.ne[0],
             " elements, not a multiple of the ", t.name, " block size ", t.block_size);
    uint64_t n_rows = 1;
    for (size_t i = 1; i < s.ne.size(); ++i) n_rows *= s.ne[i];
    GA_CHECK(w->data != nullptr && w->nbytes == row_bytes(w->type, s.ne[0]) * n_rows, InvalidFormat, "tensor ",
             s.name, " holds ", w->nbytes, " bytes, expected ", row_bytes(w->type, s.ne[0]) * n_rows);
    done += w->nbytes;
    if (progress) progress(done, total);
  }
}

ModelConfig config_from_gguf(const gguf::File& file, const std::string& path) {
  const std::optional<std::string> name = file.get_string("general.architecture");
  GA_CHECK(name.has_value(), InvalidFormat, "gguf: '", path, "' has no general.architecture key");
  const ArchInfo* arch = find_arch(*name);
  GA_CHECK(arch != nullptr, Unsupported, "unsupported architecture '", *name, "' (supported: ", supported_arch_names(),
           ")");
  ModelConfig c;
  c.arch = *name;
  c.name = file.get_string("general.name").value_or(std::filesystem::path(path).stem().string());
  arch->read_gguf(GgufKeys(file, *name), c);
  return c;
}

const ArchInfo& hf_arch_of(const hf::HfConfig& config) {
  for (const std::string& cls : config.architectures) {
    if (const ArchInfo* a = find_hf_arch(cls)) return *a;
  }
  if (config.architectures.empty()) {  // some hand-made configs only say model_type
    const ArchInfo* a = find_hf_model_type(config.model_type);
    GA_CHECK(a != nullptr, Unsupported, config.root.source(), ": no \"architectures\" and model_type '",
             config.model_type, "' is not supported");
    return *a;
  }
  std::string listed;
  for (const std::string& cls : config.architectures) listed += (listed.empty() ? "" : ", ") + cls;
  GA_THROW(Unsupported, config.root.source(), ": architecture ", listed, " is not supported (supported: ",
           supported_hf_class_names(), ")");
}

ModelConfig config_from_hf(const hf::HfConfig& config) {
  const ArchInfo& arch = hf_arch_of(config);
  ModelConfig c;
  arch.read_hf(config, c);
  return c;
}

std::unique_ptr<step::ProgramFactory> make_program_factory(const LoadedModel& model) {
  return arch_of(model.config).make_factory(model);
}

}  // namespace ga::arch
