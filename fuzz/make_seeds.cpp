// Derives small, valid GGUF seed files from real ones for the fuzz corpus.
//
// Real models are megabytes (mostly tensor data and 32k-token vocabularies), far past a useful
// -max_len. A seed keeps what makes the parser's paths interesting (every key and value type of the
// original, nested and string arrays, the real tensor names, types and dims counts) but shortens
// arrays to kMaxItems and each tensor to one block of its type, so a seed is a few KB.
//
// usage: gguf_make_seeds OUT_DIR FILE.gguf...
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "gpu_accel/gguf.h"

namespace {

constexpr size_t kMaxItems = 16;
constexpr size_t kMaxTensors = 8;

ga::gguf::Value shorten(const ga::gguf::Value& v) {
  if (v.type != ga::gguf::ValueType::ARRAY) return v;
  const auto& a = std::get<ga::gguf::Array>(v.data);
  std::vector<ga::gguf::Value> items;
  for (size_t i = 0; i < a.items.size() && i < kMaxItems; ++i) items.push_back(shorten(a.items[i]));
  return ga::gguf::Value::array(a.elem_type, std::move(items));
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR FILE.gguf...\n", argv[0]);
    return 2;
  }
  const std::string out_dir = argv[1];
  try {
    for (int i = 2; i < argc; ++i) {
      const auto f = ga::gguf::File::open(argv[i]);
      ga::gguf::Writer meta_only;
      for (const auto& kv : f.metadata()) meta_only.set(kv.key, shorten(kv.value));
      ga::gguf::Writer with_tensors = meta_only;
      for (size_t t = 0; t < f.tensors().size() && t < kMaxTensors; ++t) {
        const auto& info = f.tensors()[t];
        const auto& traits = ga::traits(info.type);
        // One block of the original bytes, keeping the number of dims: [block_size, 1, ...]
        std::vector<uint64_t> ne(info.ne.size(), 1);
        ne[0] = traits.block_size;
        with_tensors.add_tensor(info.name, info.type, ne, f.tensor_data(info), traits.type_size);
      }
      const std::string stem = out_dir + "/" + base_name(argv[i]);
      meta_only.write(stem + ".meta.seed");
      if (!f.tensors().empty()) with_tensors.write(stem + ".tensors.seed");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
