// quantize_model: plan every tensor's type first (so the log and the summary are known before any
// work), then hand the Writer one deferred fill per tensor that converts straight from the mapped
// input into the Writer's buffer on the thread pool.
#include "model/tools/quantize_model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/log.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/tools/row_convert.h"

namespace ga::tools {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION

// An integer hyperparameter, or nullopt when absent or stored per layer (an array).
std::optional<uint64_t> scalar_uint(const gguf::File& file, const std::string& key) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr || v->type == gguf::ValueType::ARRAY) return std::nullopt;
  return file.get_uint(key);
}

// ggml_n_dims: trailing dimensions of size 1 do not count.
size_t n_dims(const std::vector<uint64_t>& ne) {
  size_t n = ne.size();
  while (n > 1 && ne[n - 1] == 1) --n;
  return n;
}

MixContext mix_context(const gguf::File& file) {
  const std::string arch = file.get_string("general.architecture").value_or("llama");
  MixContext ctx;
  ctx.n_layer = static_cast<int64_t>(scalar_uint(file, arch + ".block_count").value_or(0));
  const uint64_t n_head = scalar_uint(file, arch + ".attention.head_count").value_or(1);
  const uint64_t n_head_kv = scalar_uint(file, arch + ".attention.head_count_kv").value_or(n_head);
  ctx.n_gqa = n_head_kv > 0 ? static_cast<int64_t>(n_head / n_head_kv) : 1;
  for (const auto& t : file.tensors()) {
    if (t.name.find("attn_v.weight") != std::string::npos || t.name.find("attn_qkv.weight") != std::string::npos) {
      ++ctx.n_attn_v;
    }
  }
  ctx.has_output = file.find_tensor("output.weight") != nullptr;
  return ctx;
}

// llama.cpp's weight_name_comparer: tensors outside blocks first, then block by block, by name inside.
std::vector<size_t> llama_tensor_order(const std::vector<gguf::TensorInfo>& tensors) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int64_t la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    if (la != lb) return la < lb;
    return tensors[a].name < tensors[b].name;
  });
  return order;
}

std::string shape_text(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

QuantizeSummary quantize_model(const std::string& input_path, const std::string& output_path,
                               const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<FileType> ftype = file_type_from_name(options.type);
  GA_CHECK(ftype.has_value(), InvalidArgument, "unknown quantization type '", options.type, "' (one of ",
           file_type_names(), ")");
  const gguf::File input = gguf::File::open(input_path);
  const MixContext ctx = mix_context(input);

  gguf::Writer writer;
  writer.copy_metadata(input);
  // llama-quantize sets these two last (gguf_set_val removes a key and appends it).
  writer.remove("general.quantization_version");
  writer.remove("general.file_type");
  writer.set("general.quantization_version", gguf::Value::u32(kQuantizationVersion));
  writer.set("general.file_type", gguf::Value::u32(ftype->id));

  ThreadPool pool(options.n_threads);
  QuantizeSummary summary;
  summary.ftype = *ftype;
  const auto& tensors = input.tensors();
  for (const size_t index : llama_tensor_order(tensors)) {
    const gguf::TensorInfo& t = tensors[index];
    DType new_type = t.type;
    if (should_quantize(t.name, n_dims(t.ne))) {
      std::string note;
      new_type = choose_tensor_type(*ftype, ctx, t.name, t.ne[0], options.pure, &note);
      if (!note.empty()) {
        GA_LOG(Warn, note);
        ++summary.n_fallback;
      }
    }
    const int64_t cols = static_cast<int64_t>(t.ne[0]);
    const int64_t rows = static_cast<int64_t>(t.n_elements / t.ne[0]);
    const uint8_t* src = input.tensor_data(t);
    const DType src_type = t.type;
    GA_CHECK(new_type == src_type || traits(src_type).supported, Unsupported, "tensor '", t.name, "' has type ",
             dtype_name(src_type), ", which cannot be converted");
    GA_LOG(Debug, "[", summary.n_tensors + 1, "/", tensors.size(), "] ", t.name, " ", shape_text(t.ne), " ",
           dtype_name(src_type), " -> ", dtype_name(new_type));
    writer.add_tensor_deferred(t.name, new_type, t.ne, [=, &pool](uint8_t* dst) {
      convert_rows(src_type, src, new_type, dst, rows, cols, &pool);
    });
    summary.input_bytes += t.nbytes;
    summary.output_bytes += row_bytes(new_type, t.ne[0]) * static_cast<uint64_t>(rows);
    summary.n_converted += new_type != src_type ? 1 : 0;
    ++summary.n_tensors;
  }
  writer.write(output_path);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace ga::tools
