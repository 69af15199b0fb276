// apply_precision (gpu_accel/precision.h): which matrices change type, and the conversion.
//
// The matrices are found by building the architecture's Program against a probe Binder that records every name
// bound as a matrix (Binder::matrix / find_matrix): exactly the tensors the backends read through a matrix
// product, an embedding gather or the classifier, for any architecture, and never a vector (norms, biases,
// RWKV's decays and mixes are read as float32 by every backend). Of these, fp8 converts the ones inside a layer
// ("blk.N." or RWKV's "blocks.N."), except MoE routers (their top-k choice flips on rounding) and the layers the
// caller keeps; the embeddings and the output head are outside every layer. bf16 converts every float matrix, as
// vLLM's --dtype bfloat16 does.
//
// A converted matrix gets a buffer of its own (LoadedModel::storage) and its view is repointed; the mapping of
// the file stays, so the conversion costs the new bytes only. Rows convert in parallel (tools::convert_rows: the
// CPU backend's dequantize_row, then quantize_row, whose F8_B128 case is the shared E4M3 quantizer).
#include "gpu_accel/precision.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "backends/step_ops.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "model/arch/architecture.h"
#include "model/tools/row_convert.h"

namespace ga {
namespace {

// Records the names the Program binds as matrices; every other request gets a dummy handle.
class MatrixProbe final : public step::Binder {
 public:
  explicit MatrixProbe(const LoadedModel& model) : model_(model) {}
  const std::set<std::string, std::less<>>& matrices() const { return matrices_; }

  step::Weight find_matrix(std::string_view name) override {
    if (model_.find_weight(name) == nullptr) return {};
    matrices_.emplace(name);
    return step::Weight{next_++};
  }
  step::Weight matrix(std::string_view name) override {
    const step::Weight w = find_matrix(name);
    GA_CHECK(static_cast<bool>(w), InvalidFormat, "model '", model_.config.name, "' has no tensor ", name);
    return w;
  }
  step::Vec find_vector(std::string_view name) override {
    return model_.find_weight(name) == nullptr ? step::Vec{} : step::Vec{next_++};
  }
  step::Vec vector(std::string_view name) override {
    const step::Vec v = find_vector(name);
    GA_CHECK(static_cast<bool>(v), InvalidFormat, "model '", model_.config.name, "' has no tensor ", name);
    return v;
  }
  step::Buf buffer(int64_t) override { return step::Buf{next_++}; }
  step::Rope rope(const step::RopeTable&) override { return step::Rope{next_++}; }
  step::Kv kv(int64_t layer) override { return step::Kv{static_cast<int32_t>(layer)}; }
  step::Rec recurrent(int64_t slot) override { return step::Rec{static_cast<int32_t>(slot)}; }
  int64_t max_step_tokens() const override { return 1; }
  int64_t max_positions() const override { return 1; }

 private:
  const LoadedModel& model_;
  std::set<std::string, std::less<>> matrices_;
  int32_t next_ = 0;
};

// The layer of "blk.N.x" (GGUF) or "blocks.N.x" (rwkv.cpp's names, which the RWKV loaders use); -1 outside a layer.
int64_t layer_index(std::string_view name) {
  for (const std::string_view prefix : {std::string_view("blk."), std::string_view("blocks.")}) {
    if (!name.starts_with(prefix)) continue;
    const char* begin = name.data() + prefix.size();
    const char* end = name.data() + name.size();
    int64_t layer = -1;
    const auto [ptr, ec] = std::from_chars(begin, end, layer);
    if (ec == std::errc() && ptr != begin && ptr != end && *ptr == '.') return layer;
  }
  return -1;
}

bool is_router(std::string_view name) { return name.find("ffn_gate_inp") != std::string_view::npos; }

// "0 and 15", "0, 1 and 15"
std::string layer_text(const std::set<int64_t>& layers) {
  std::ostringstream os;
  size_t i = 0;
  for (const int64_t l : layers) {
    if (i > 0) os << (i + 1 == layers.size() ? " and " : ", ");
    os << l;
    ++i;
  }
  return os.str();
}

std::string type_list(const std::set<DType>& types) {
  std::ostringstream os;
  for (const DType t : types) os << (os.tellp() > 0 ? "/" : "") << dtype_name(t);
  return os.str();
}

// The resolved mode, and why for auto.
struct Choice {
  Precision mode = Precision::Native;
  std::string reason;
};

Choice choose(const LoadedModel& model, const std::set<std::string, std::less<>>& matrices, Precision asked,
              const PrecisionTarget& target) {
  if (asked != Precision::Auto) return {asked, ""};
  std::set<DType> quantized;
  int64_t float_weights = 0;
  for (const auto& name : matrices) {
    const WeightView& w = model.weight(name);
    if (layer_index(name) < 0 || is_router(name)) continue;
    if (!is_float_type(w.type)) {
      quantized.insert(w.type);
      continue;
    }
    int64_t n = 1;
    for (const uint64_t d : w.ne) n *= static_cast<int64_t>(d);
    float_weights += n;
  }
  if (!target.gpu) return {Precision::Native, "auto: no FP8 on the CPU"};
  if (!target.has_fp8_tensor_cores()) return {Precision::Native, "auto: " + target.name() + " has no FP8 tensor cores"};
  if (!quantized.empty()) {
    return {Precision::Native, "auto: the layer matrices are already quantized (" + type_list(quantized) + ")"};
  }
  std::ostringstream billions;
  billions.precision(2);
  billions << static_cast<double>(float_weights) / 1e9 << "B";
  if (target.cc_major != 9 || target.cc_minor != 0) {
    return {Precision::Native, "auto: " + target.name() +
                                   " has FP8 tensor cores, but the FP8 prefill GEMM is measured on Hopper (sm_90) "
                                   "only: native"};
  }
  if (!auto_picks_fp8(target, float_weights)) {
    return {Precision::Native, "auto: the layer matrices hold " + billions.str() +
                                   " weights; FP8 is faster from 3B on (H200: Llama-3-8B decode 1.17x, Llama-3.2-1B "
                                   "0.95x of 16-bit): native"};
  }
  return {Precision::Fp8, "auto: sm_90 and " + billions.str() +
                              " layer weights (H200: Llama-3-8B decode 1.17x, pp2048 1.22x of BF16)"};
}

void convert(LoadedModel& model, WeightView& w, DType to, ThreadPool& pool) {
  // a matrix, or a stack of expert matrices: every row of ne[0] weights converts on its own
  int64_t rows = 1;
  for (size_t d = 1; d < w.ne.size(); ++d) rows *= static_cast<int64_t>(w.ne[d]);
  const uint64_t bytes = row_bytes(to, w.ne[0]) * static_cast<uint64_t>(rows);
  auto buffer = std::make_shared<std::vector<uint8_t>>(bytes);
  tools::convert_rows(w.type, w.data, to, buffer->data(), rows, w.cols(), &pool);
  w.type = to;
  w.data = buffer->data();
  w.nbytes = bytes;
  model.storage.push_back(std::move(buffer));
}

}  // namespace

std::string PrecisionTarget::name() const {
  return gpu ? "sm_" + std::to_string(cc_major) + std::to_string(cc_minor) : "cpu";
}

Precision precision_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const Precision p : {Precision::Auto, Precision::Native, Precision::Bf16, Precision::Fp8}) {
    if (lower == precision_name(p)) return p;
  }
  GA_THROW(InvalidArgument, "unknown precision '", name, "' (auto, native, bf16 or fp8)");
}

bool auto_picks_fp8(const PrecisionTarget& target, int64_t layer_float_weights) {
  return target.gpu && target.cc_major == 9 && target.cc_minor == 0 && layer_float_weights >= kAutoFp8MinWeights;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Auto: return "auto";
    case Precision::Native: return "native";
    case Precision::Bf16: return "bf16";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

std::vector<int64_t> parse_layer_list(std::string_view text) {
  std::vector<int64_t> layers;
  if (text.empty() || text == "none") return layers;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    GA_CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size(), InvalidArgument,
             "layer list '", text, "': '", item, "' is not a layer index (a comma list of integers such as 0,-1; "
             "negatives count from the end; 'none' keeps no layer)");
    layers.push_back(v);
    start = comma + 1;
  }
  return layers;
}

void apply_precision(LoadedModel& model, const PrecisionOptions& options, const PrecisionTarget& target) {
  const int64_t n_layer = model.config.n_layer;
  std::set<int64_t> kept_layers;
  for (const int64_t l : options.keep_layers) {
    GA_CHECK(l >= -n_layer && l < n_layer, InvalidArgument, "layer ", l, " is outside the model's ",
             n_layer, " layers (0..", n_layer - 1, ", or -", n_layer, "..-1 from the end)");
    kept_layers.insert(l < 0 ? l + n_layer : l);
  }
  MatrixProbe probe(model);
  arch::make_program_factory(model)->build(probe);
  const Choice choice = choose(model, probe.matrices(), options.mode, target);

  std::ostringstream line;
  line << precision_name(choice.mode);
  if (!choice.reason.empty()) line << " (" << choice.reason << ")";
  if (choice.mode == Precision::Native) {
    model.precision = {"native", choice.reason.empty() ? "native (weights as stored)" : line.str() + ": weights as stored"};
    return;
  }
  const DType to = choice.mode == Precision::Fp8 ? DType::F8_B128 : DType::BF16;
  // rows F8_B128 can hold (blocks of 128); for BF16 rows of whole 16-byte chunks (8 values), which the CUDA GEMV
  // reads: the same rule on every device, so a converted model runs wherever its native one does
  const int64_t block = to == DType::F8_B128 ? traits(to).block_size : 8;
  ThreadPool pool(0);
  int converted = 0, unfit = 0, quantized = 0;
  std::set<DType> quantized_types, kept_types;
  bool kept_outside = false, kept_router = false;
  for (const auto& name : probe.matrices()) {
    WeightView& w = model.weights.find(name)->second;
    const int64_t layer = layer_index(name);
    if (to == DType::F8_B128 && (layer < 0 || is_router(name) || kept_layers.count(layer) > 0)) {
      kept_outside |= layer < 0;
      kept_router |= layer >= 0 && is_router(name);
      if (is_float_type(w.type)) kept_types.insert(w.type);
      continue;
    }
    if (!is_float_type(w.type)) {  // Q4_0 ... and F8_B128 stay under every mode
      ++quantized;
      quantized_types.insert(w.type);
      continue;
    }
    if (w.type == to) continue;  // bf16 of a BF16 matrix
    if (w.cols() % block != 0) {
      ++unfit;
      continue;
    }
    convert(model, w, to, pool);
    ++converted;
  }
  line << "; " << converted << " matrices " << dtype_name(to);
  if (to == DType::F8_B128) {
    line << ", kept " << (kept_types.empty() ? std::string("as stored") : type_list(kept_types)) << ": "
         << (kept_outside ? "embeddings, output, norms" : "norms") << (kept_router ? ", routers" : "");
    if (!kept_layers.empty()) line << (kept_layers.size() == 1 ? ", layer " : ", layers ") << layer_text(kept_layers);
  }
  if (unfit > 0) line << "; " << unfit << " stay as stored (rows not a multiple of " << block << ")";
  if (quantized > 0) line << "; " << quantized << " quantized (" << type_list(quantized_types) << ") as stored";
  // the mode says what the weights are: asked for fp8 and nothing could convert (stories260K), they are native
  model.precision = {converted > 0 ? precision_name(choice.mode) : "native", line.str()};
}

}  // namespace ga
