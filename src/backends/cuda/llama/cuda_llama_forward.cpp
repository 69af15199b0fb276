// CudaLlamaForward: construction (fit check, KV pool sizing, upload, allocation); see the header.
//
// Why the step is enqueued the way it is:
//  * The residual stream `resid_` is only ever updated by the fused residual+RMSNorm kernel: a
//    block's output (tmp_) is added to the stream by the *next* norm, so each sub-layer boundary is
//    one kernel and one pass over [n][n_embd].
//  * Everything a step reads from the host (token ids, positions, slots, runs, block tables) is in
//    one device buffer, so the one-token step is position-independent and captured once as a CUDA
//    graph (launch_graph); other steps are enqueued directly because their shapes vary and
//    cuBLAS picks kernels per shape.
//  * The paged pool's size is decided here, after the weights and the scratch are counted, so
//    "as many blocks as fit" is one division and an explicit size that does not fit is refused
//    with every byte count before anything is allocated.
//  * Q/K/V and gate/up of a layer are placed back to back in the weight buffer when they share type
//    and width (fusable_groups), so the step runs each group as one GEMV (header: why).
//  * The prefill of quantized weights dequantizes each matrix into one f16 scratch and runs a
//    cuBLAS GEMM on it (first version: simple and tensor-core fast, at the price of writing the
//    matrix once in f16 per step; a fused quantized GEMM is the next step).
#include "backends/cuda/llama/cuda_llama_forward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/llama/llama_kernels.h"
#include "gpu_accel/error.h"

#ifndef GA_CUDA_ARCHS_STR
#define GA_CUDA_ARCHS_STR "?"
#endif

namespace ga::cuda::llama {
namespace {

constexpr uint64_t kTensorAlign = 256;
constexpr uint64_t kTensorPad = 16;  // decoders may read a few bytes past a tensor's last block
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr int64_t kMaxSlots = (int64_t{1} << 31) - 1;  // KV pool rows: slots are int32 in the step metadata
constexpr double kMiB = 1024.0 * 1024.0;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
int64_t ld4(int64_t n) { return (n + 3) / 4 * 4; }  // float4-friendly row stride

const WeightView& need(const LoadedModel& model, const std::string& name) {
  const auto it = model.weights.find(name);
  GA_CHECK(it != model.weights.end(), InvalidFormat, "model is missing tensor ", name);
  return it->second;
}

const WeightView* find(const LoadedModel& model, const std::string& name) {
  const auto it = model.weights.find(name);
  return it == model.weights.end() ? nullptr : &it->second;
}

// A 1-D tensor as float32 on the host (norms and biases are F32 in GGUF; F16/BF16 from other sources).
std::vector<float> vector_f32(const WeightView& w) {
  const size_t n = static_cast<size_t>(w.cols());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = 0;
    switch (w.type) {
      case DType::F32: std::memcpy(&out[i], w.data + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, w.data + 2 * i, 2); out[i] = fp16_to_f32(h); break;
      case DType::BF16: std::memcpy(&h, w.data + 2 * i, 2); out[i] = bf16_to_f32(h); break;
      default:
        GA_THROW(Unsupported, "tensor ", w.name, " is a 1-D ", dtype_name(w.type),
                 " tensor; the CUDA forward reads 1-D tensors of F32, F16 or BF16");
    }
  }
  return out;
}

bool is_float_type(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32; }

// The groups of matrices uploaded back to back: per layer {q, k, v} and {gate, up} when every member
// is a 2-D matrix of one type and one width (rows then follow each other at the same row_bytes, so
// the group is one matrix). Mixed-type files (Q4_K_M keeps attn_v in Q6_K in half of the layers) fuse
// {q, k} when only v differs: one GEMV of q_dim + kv_dim rows instead of two 4096-row GEMVs, each near
// the ~7 us floor of a short GEMV (docs/results/2026-11-22-h200-gemv-session2.md, Session 6).
std::vector<std::vector<std::string>> fusable_groups(const LoadedModel& model, int64_t n_layer) {
  std::vector<std::vector<std::string>> groups;
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const std::vector<std::string>& g :
         {std::vector<std::string>{p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
          std::vector<std::string>{p + "ffn_gate.weight", p + "ffn_up.weight"}}) {
      const auto fusable = [&](size_t members) {
        bool ok = true;
        const WeightView* first = find(model, g[0]);
        for (size_t i = 0; i < members; ++i) {
          const WeightView* w = find(model, g[i]);
          ok = ok && w != nullptr && first != nullptr && w->ne.size() == 2 && w->type == first->type &&
               w->cols() == first->cols() &&
               w->nbytes == static_cast<uint64_t>(w->rows()) * row_bytes(w->type, static_cast<uint64_t>(w->cols()));
        }
        return ok;
      };
      if (fusable(g.size())) {
        groups.push_back(g);
      } else if (g.size() == 3 && fusable(2)) {  // {q, k}: v of another type
        groups.push_back({g[0], g[1]});
      }
    }
  }
  return groups;
}

}  // namespace

struct CudaLlamaForward::Sizes {
  uint64_t weights = 0;
  uint64_t kv = 0;
  uint64_t scratch = 0;
  int64_t max_cols = 0;        // the widest matrix input (GEMM x staging)
  uint64_t max_dequant = 0;    // elements of the largest matrix a prefill dequantizes
};

CudaLlamaForward::Sizes CudaLlamaForward::plan_sizes(const LoadedModel& model) const {
  Sizes s;
  for (const auto& [name, w] : model.weights) {
    if (w.ne.size() >= 2) {
      s.max_cols = std::max(s.max_cols, w.cols());
      if (!is_float_type(w.type)) s.max_dequant = std::max<uint64_t>(s.max_dequant, w.ne[0] * w.ne[1]);
      s.weights += align_up(w.nbytes + kTensorPad, kTensorAlign);
    } else {
      s.weights += align_up(static_cast<uint64_t>(w.cols()) * 4 + kTensorPad, kTensorAlign);
    }
  }
  for (const std::vector<std::string>& g : fusable_groups(model, c_.n_layer)) {
    const WeightView& w0 = model.weights.at(g[0]);
    if (is_float_type(w0.type)) continue;
    uint64_t elems = 0;
    for (const std::string& name : g) elems += model.weights.at(name).ne[0] * model.weights.at(name).ne[1];
    s.max_dequant = std::max(s.max_dequant, elems);
  }
  s.kv = kv_bytes_per_slot() * static_cast<uint64_t>(n_slots_);
  const uint64_t b = static_cast<uint64_t>(layout_.max_batch);
  const uint64_t act = 3 * static_cast<uint64_t>(ld_embd_) + static_cast<uint64_t>(ld_qkv_) +
                       static_cast<uint64_t>(ld_q_) + static_cast<uint64_t>(ld_gu_) + static_cast<uint64_t>(c_.n_vocab);
  s.scratch = b * act * 4 + b * static_cast<uint64_t>(s.max_cols) * 2 + s.max_dequant * 2 +
              static_cast<uint64_t>(metadata_ints()) * 4 + (size_t{32} << 20);  // + the cuBLAS workspace
  s.scratch += static_cast<uint64_t>(x_int8_scratch_bytes());
  return s;
}

CudaLlamaForward::CudaLlamaForward(const LoadedModel& model, const EngineLayout& layout)
    : c_(model.config), layout_(layout), allocator_(layout.device), stream_(layout.device) {
  DeviceGuard guard(layout.device);
  GA_CHECK(c_.arch == "llama" || c_.arch == "qwen2", Unsupported, "the CUDA forward runs the Llama family, not '",
           c_.arch, "'");
  GA_CHECK(layout_.max_seq_positions > 0 && layout_.max_seq_positions <= kMaxContext, InvalidArgument,
           "context length ", layout_.max_seq_positions, " is outside [1, ", kMaxContext, "]");
  GA_CHECK(layout_.max_batch > 0 && layout_.max_batch <= 8192, InvalidArgument, "max_batch ", layout_.max_batch,
           " is outside [1, 8192]");
  GA_CHECK(layout_.max_seqs > 0 && layout_.max_seqs <= layout_.max_batch, InvalidArgument, "max_seqs ",
           layout_.max_seqs, " is outside [1, max_batch = ", layout_.max_batch, "]");
  GA_CHECK(layout_.block_size > 0 && layout_.block_size <= kMaxContext, InvalidArgument, "block_size ",
           layout_.block_size, " is outside [1, ", kMaxContext, "]");
  GA_CHECK(layout_.n_blocks >= 0 && layout_.n_blocks <= kMaxSlots / layout_.block_size, InvalidArgument,
           "a KV pool of ", layout_.n_blocks, " blocks x ", layout_.block_size, " positions is too large");
  GA_CHECK(layout_.paged || layout_.n_blocks == 1, InvalidArgument, "a contiguous cache is one block");
  GA_CHECK(layout_.rope_freq_factors.empty() ||
               static_cast<int64_t>(layout_.rope_freq_factors.size()) == c_.n_rot / 2,
           InvalidArgument, "rope_freq_factors has ", layout_.rope_freq_factors.size(), " entries, expected ",
           c_.n_rot / 2);
  q_dim_ = c_.n_head * c_.head_dim;
  kv_dim_ = c_.n_head_kv * c_.head_dim;
  ld_embd_ = ld4(c_.n_embd);
  ld_q_ = ld4(q_dim_);
  ld_qkv_ = ld4(q_dim_ + 2 * kv_dim_);
  ld_gu_ = ld4(2 * c_.n_ff);
  table_stride_ = layout_.paged ? (layout_.max_seq_positions + layout_.block_size - 1) / layout_.block_size : 0;

  // Every matrix must be readable by the GEMV (decode) and the embedding gather; say which is not.
  for (const auto& [name, w] : model.weights) {
    if (w.ne.size() < 2) continue;
    GA_CHECK(gemv_supports(w.type) && dequantize_f16_supports(w.type), Unsupported, "tensor ", name, " has type ",
             dtype_name(w.type),
             ", which the CUDA kernels do not read yet (supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K "
             "Q4_K Q5_K Q6_K)");
  }

  const CudaDeviceInfo info = device_info(layout.device);
  size_t free_bytes = 0, total_bytes = 0;
  GA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t block_bytes = kv_bytes_per_slot() * static_cast<uint64_t>(layout_.block_size);
  if (layout_.n_blocks == 0) {  // paged, automatic: what is left after weights and scratch
    n_slots_ = 0;
    const Sizes fixed = plan_sizes(model);
    const uint64_t rest = free_bytes > fixed.weights + fixed.scratch ? free_bytes - fixed.weights - fixed.scratch : 0;
    int64_t fit = static_cast<int64_t>(static_cast<double>(rest) * layout_.kv_memory_fraction /
                                       static_cast<double>(block_bytes));
    fit = std::min(fit, kMaxSlots / layout_.block_size);
    if (layout_.max_auto_blocks > 0) fit = std::min(fit, layout_.max_auto_blocks);
    GA_CHECK(fit >= 1, OutOfMemory, "no room for a KV pool on cuda:", layout.device, " (", info.name, "): weights ",
             static_cast<double>(fixed.weights) / kMiB, " MiB + scratch ", static_cast<double>(fixed.scratch) / kMiB,
             " MiB leave ", static_cast<double>(rest) / kMiB, " MiB of ", static_cast<double>(free_bytes) / kMiB,
             " MiB free, and one block of ", layout_.block_size, " positions needs ",
             static_cast<double>(block_bytes) / kMiB, " MiB");
    layout_.n_blocks = fit;
  }
  n_slots_ = layout_.n_blocks * layout_.block_size;
  const Sizes s = plan_sizes(model);
  const uint64_t needed = s.weights + s.kv + s.scratch;
  GA_CHECK(needed <= free_bytes, OutOfMemory, "the model does not fit on cuda:", layout.device, " (", info.name,
           "): weights ", static_cast<double>(s.weights) / kMiB, " MiB + KV cache (", n_slots_, " positions, f16) ",
           static_cast<double>(s.kv) / kMiB, " MiB + scratch ", static_cast<double>(s.scratch) / kMiB,
           " MiB = ", static_cast<double>(needed) / kMiB, " MiB, but only ", static_cast<double>(free_bytes) / kMiB,
           " MiB of ", static_cast<double>(total_bytes) / kMiB, " MiB are free (reduce the context or use a smaller "
           "quantization)");

  gemm_ = std::make_unique<Gemm>(allocator_, stream_.get());
  upload_weights(model);
  allocate_state();
  device_bytes_ = needed;
  kv_bytes_ = s.kv;
  if (layout_.paged && layout_.use_cuda_graph) {  // every decode batch size, now (header: why)
    for (int64_t n = 1; n <= layout_.max_seqs; ++n) capture_graph(decode_shape(n));
  }

  const int binary = kernel_binary_version();
  description_ = str("cuda:", layout.device, " ", info.name, " (sm_", info.cc_major, info.cc_minor, ", ",
                     info.sm_count, " SMs), kernels sm_", binary >= 0 ? std::to_string(binary) : std::string("?"),
                     " (built for ", GA_CUDA_ARCHS_STR, "), ", static_cast<double>(needed) / kMiB, " MiB on device");
  description_ += prefill_staging_.data() != nullptr ? ", prefill attention: Hopper flash (sm_90a)"
                                                     : ", prefill attention: mma.sync";
  prefill_stats_.max_tokens = layout_.prefill_graph_max_tokens;
  if (layout_.paged) {
    description_ += str(", KV pool ", layout_.n_blocks, " x ", layout_.block_size, " positions (",
                        static_cast<double>(s.kv) / kMiB, " MiB)");
  }
}

std::string CudaLlamaForward::description() const {
  const PrefillGraphStats& g = prefill_stats_;
  if (g.max_tokens <= 0) return description_ + ", prefill graphs off";
  return description_ + str(", prefill graphs <= ", g.max_tokens, " tokens: ", g.captured, " captured in ",
                            g.capture_seconds * 1e3, " ms, ", static_cast<double>(g.device_bytes) / kMiB, " MiB");
}

CudaLlamaForward::~CudaLlamaForward() {
  // A step left queued (forward_device_queued) whose sampling threw before its synchronize may still read the
  // staging and scratch memory freed below: wait for it (a destructor reports nothing; the error stays with the stream).
  try {
    settle_queued_step();
  } catch (...) {
  }
  destroy_graphs();
  if (host_staging_ != nullptr) (void)cudaFreeHost(host_staging_);
  if (host_logits_ != nullptr) (void)cudaFreeHost(host_logits_);
  (void)cudaGetLastError();
}

void CudaLlamaForward::upload_weights(const LoadedModel& model) {
  uint64_t total = 0;
  for (const auto& [name, w] : model.weights) {
    const uint64_t bytes = w.ne.size() >= 2 ? w.nbytes : static_cast<uint64_t>(w.cols()) * 4;
    total += align_up(bytes + kTensorPad, kTensorAlign);
  }
  weights_ = DeviceBuffer(allocator_, total);
  GA_CUDA_CHECK(cudaMemsetAsync(weights_.data(), 0, total, stream_.get()));  // the padding reads as zeros
  uint8_t* base = weights_.as<uint8_t>();
  uint64_t offset = 0;
  std::map<std::string, const uint8_t*, std::less<>> placed;
  // Fused groups first, members back to back (no padding between them: the group is one matrix),
  // the group padded as one tensor. A group needs no more room than its members apart.
  const std::vector<std::vector<std::string>> groups = fusable_groups(model, c_.n_layer);
  for (const std::vector<std::string>& g : groups) {
    uint64_t bytes = 0;
    for (const std::string& name : g) {
      const WeightView& w = model.weights.at(name);
      GA_CUDA_CHECK(cudaMemcpyAsync(base + offset + bytes, w.data, w.nbytes, cudaMemcpyHostToDevice, stream_.get()));
      placed[name] = base + offset + bytes;
      bytes += w.nbytes;
    }
    offset += align_up(bytes + kTensorPad, kTensorAlign);
  }
  for (const auto& [name, w] : model.weights) {
    if (placed.count(name) != 0) continue;
    uint8_t* dst = base + offset;
    if (w.ne.size() >= 2) {
      GA_CUDA_CHECK(cudaMemcpyAsync(dst, w.data, w.nbytes, cudaMemcpyHostToDevice, stream_.get()));
      offset += align_up(w.nbytes + kTensorPad, kTensorAlign);
    } else {
      const std::vector<float> v = vector_f32(w);
      GA_CUDA_CHECK(cudaMemcpyAsync(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream_.get()));
      stream_.synchronize();  // v dies at the end of this iteration
      offset += align_up(v.size() * 4 + kTensorPad, kTensorAlign);
    }
    placed[name] = dst;
  }
  // One-time reordering of each row's bytes where the decode GEMV reads the split layout faster
  // (weight_layout.h); every reader below is given the matrix's layout.
  for (const auto& [name, w] : model.weights) {
    if (w.ne.size() < 2 || !gemv_prefers_split_rows(w.type, w.cols())) continue;
    const auto rb = static_cast<int64_t>(row_bytes(w.type, static_cast<uint64_t>(w.cols())));
    GA_CUDA_CHECK(split_rows_in_place(w.type, const_cast<uint8_t*>(placed.at(name)), w.rows(), w.cols(), rb,
                                      stream_.get()));
  }
  stream_.synchronize();

  const auto matrix = [&](const std::string& name) {
    const WeightView& w = need(model, name);
    DeviceMatrix m;
    m.type = w.type;
    m.data = placed.at(name);
    m.rows = w.rows();
    m.cols = w.cols();
    m.row_bytes = static_cast<int64_t>(row_bytes(w.type, static_cast<uint64_t>(w.cols())));
    m.layout = gemv_prefers_split_rows(w.type, m.cols) ? WeightLayout::kSplitRows : WeightLayout::kGguf;
    return m;
  };
  const auto vec = [&](const std::string& name) -> const float* {
    need(model, name);  // a clear error for a missing tensor
    return reinterpret_cast<const float*>(placed.at(name));
  };
  token_embd_ = matrix("token_embd.weight");
  output_ = find(model, "output.weight") != nullptr ? matrix("output.weight") : token_embd_;
  output_norm_ = vec("output_norm.weight");
  layers_.resize(static_cast<size_t>(c_.n_layer));
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    DeviceLayer& L = layers_[static_cast<size_t>(il)];
    L.attn_norm = vec(p + "attn_norm.weight");
    L.ffn_norm = vec(p + "ffn_norm.weight");
    if (c_.qkv_bias) {
      L.bq = vec(p + "attn_q.bias");
      L.bk = vec(p + "attn_k.bias");
      L.bv = vec(p + "attn_v.bias");
    }
    L.wq = matrix(p + "attn_q.weight");
    L.wk = matrix(p + "attn_k.weight");
    L.wv = matrix(p + "attn_v.weight");
    L.wo = matrix(p + "attn_output.weight");
    L.w_gate = matrix(p + "ffn_gate.weight");
    L.w_up = matrix(p + "ffn_up.weight");
    L.w_down = matrix(p + "ffn_down.weight");
  }
  // A group's matrix: its first member's start, every member's rows (same type, width, row_bytes).
  for (const std::vector<std::string>& g : groups) {
    const int64_t il = std::stoll(g[0].substr(4, g[0].find('.', 4) - 4));  // "blk.<il>.<name>"
    DeviceLayer& L = layers_[static_cast<size_t>(il)];
    DeviceMatrix fused = matrix(g[0]);
    for (size_t i = 1; i < g.size(); ++i) fused.rows += need(model, g[i]).rows();
    const bool attention = g[0].find("attn_q.weight") != std::string::npos;
    (attention ? (g.size() == 3 ? L.wqkv : L.wqk) : L.w_gate_up) = fused;
  }
  // rope_freqs.weight in the file wins over factors passed in (the loader may synthesize the tensor).
  if (find(model, "rope_freqs.weight") != nullptr) {
    freq_factors_ = vec("rope_freqs.weight");
  } else if (!layout_.rope_freq_factors.empty()) {
    freq_buf_ = DeviceBuffer(allocator_, layout_.rope_freq_factors.size() * 4);
    GA_CUDA_CHECK(cudaMemcpy(freq_buf_.data(), layout_.rope_freq_factors.data(), freq_buf_.size(),
                             cudaMemcpyHostToDevice));
    freq_factors_ = freq_buf_.as<float>();
  }
}

void CudaLlamaForward::allocate_state() {
  const int64_t B = layout_.max_batch;
  const auto f32 = [&](int64_t ld) { return DeviceBuffer(allocator_, static_cast<size_t>(B * ld) * 4); };
  resid_ = f32(ld_embd_);
  xn_ = f32(ld_embd_);
  tmp_ = f32(ld_embd_);
  qkv_ = f32(ld_qkv_);
  attn_ = f32(ld_q_);
  gu_ = f32(ld_gu_);
  if (x_int8_scratch_bytes() > 0) xq_ = DeviceBuffer(allocator_, static_cast<size_t>(x_int8_scratch_bytes()));
  logits_ = f32(c_.n_vocab);
  const size_t meta_bytes = static_cast<size_t>(metadata_ints()) * 4;
  step_in_ = DeviceBuffer(allocator_, meta_bytes);
  GA_CUDA_CHECK(cudaMemsetAsync(step_in_.data(), 0, meta_bytes, stream_.get()));  // block tables start valid
  GA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_staging_), meta_bytes));
  std::memset(host_staging_, 0, meta_bytes);
  if (layout_.paged) {
    GA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_logits_),
                                 static_cast<size_t>(layout_.max_seqs * c_.n_vocab) * 4));
  }

  int64_t max_cols = 0;
  uint64_t max_dequant = 0;
  const auto consider = [&](const DeviceMatrix& m) {
    max_cols = std::max(max_cols, m.cols);
    if (!is_float_type(m.type)) max_dequant = std::max<uint64_t>(max_dequant, static_cast<uint64_t>(m.rows * m.cols));
  };
  consider(output_);
  for (const DeviceLayer& L : layers_) {
    for (const DeviceMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) consider(*m);
    if (L.wqkv.rows > 0) consider(L.wqkv);
    if (L.wqk.rows > 0) consider(L.wqk);
    if (L.w_gate_up.rows > 0) consider(L.w_gate_up);
  }
  if (B > kGemvMaxTokens) {  // only a GEMM needs the staging buffers
    x_stage_ = DeviceBuffer(allocator_, static_cast<size_t>(B * max_cols) * 2);
    if (max_dequant > 0) w_stage_ = DeviceBuffer(allocator_, max_dequant * 2);
  }

  // [n_slots][kv_dim] f16 per layer, K then V. Zeroed: a slot never written reads as 0, not NaN.
  const size_t kv_plane = static_cast<size_t>(n_slots_ * kv_dim_) * sizeof(__half);
  kv_ = DeviceBuffer(allocator_, kv_plane * 2 * static_cast<size_t>(c_.n_layer));
  GA_CUDA_CHECK(cudaMemsetAsync(kv_.data(), 0, kv_.size(), stream_.get()));
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    uint8_t* base = kv_.as<uint8_t>() + 2 * static_cast<size_t>(il) * kv_plane;
    layers_[static_cast<size_t>(il)].k_cache = reinterpret_cast<__half*>(base);
    layers_[static_cast<size_t>(il)].v_cache = reinterpret_cast<__half*>(base + kv_plane);
  }

  // The tuned attention's split-KV workspace, for the largest step it will see. Contiguous: the
  // decode path takes batches of 1..8 tokens (its split count, hence the workspace, varies with the
  // batch); the prefill path above 8 needs none. Paged: decode-only steps of 1..max_seqs sequences
  // and the largest mixed step. Every size is asked of the parameters the launches use
  // (attention_params, layer 0: every layer's cache has the same layout) with the paged bound on
  // positions the steps carry (decode_shape, validate_batch: at most max_seq_positions).
  const auto bounds = [&](int64_t n_tokens, int64_t n_seqs, int64_t max_seq_tokens) {
    StepShape shape;
    shape.n_tokens = n_tokens;
    shape.paged = layout_.paged;
    shape.n_seqs = static_cast<int>(n_seqs);
    shape.max_seq_tokens = max_seq_tokens;
    shape.max_kv_positions = layout_.max_seq_positions;  // the paged form's bound (contiguous: n_slots_)
    return shape;
  };
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (n_tokens, n_seqs)
  if (layout_.paged) {
    // The paged workspace for the largest bounds covers every smaller call (attention.h); the
    // decode-only shapes are asked too in case the largest one is refused.
    for (int64_t n = 1; n <= layout_.max_seqs; ++n) shapes.emplace_back(n, n);
    shapes.emplace_back(B, layout_.max_seqs);
  } else {
    for (int64_t n = 1; n <= std::min<int64_t>({B, n_slots_, kGemvMaxTokens}); ++n) shapes.emplace_back(n, 1);
  }
  // Sized before asking attention_unsupported_reason: that check also wants the workspace, so asking
  // it first left the workspace empty and sent every decode step to the simple attention.
  for (const auto& [n, n_seqs] : shapes) {
    AttentionParams ap = attention_params(layers_[0], bounds(n, n_seqs, n == n_seqs ? 1 : n));
    ap.workspace = nullptr;
    ap.workspace_bytes = 0;
    const size_t bytes = attention_workspace_bytes(ap);
    if (bytes > 0) {
      attn_workspace_ = DeviceBuffer(allocator_, bytes);  // stand-in, so the check below sees a workspace
      ap.workspace = attn_workspace_.data();
      ap.workspace_bytes = bytes;
    }
    if (attention_unsupported_reason(ap) == nullptr) attn_workspace_bytes_ = std::max(attn_workspace_bytes_, bytes);
  }
  if (attn_workspace_bytes_ > 0) {
    attn_workspace_ = DeviceBuffer(allocator_, attn_workspace_bytes_);
    // zero once: the merge counters in it start at zero and every call leaves them so (attention.h)
    GA_CUDA_CHECK(cudaMemsetAsync(attn_workspace_.data(), 0, attn_workspace_bytes_, stream_.get()));
  }
  // Staging of the Hopper prefill for the largest step (B tokens; in the paged layout max_seqs runs), kept only
  // when the Hopper kernel takes that step's prefill (attention_hopper_prefill_reason).
  const char* mma_only = std::getenv("GA_ATTN_PREFILL");
  if (!(mma_only != nullptr && std::strcmp(mma_only, "mma") == 0)) {
    const int64_t n = layout_.paged ? B : std::min<int64_t>(B, n_slots_);
    AttentionParams ap = attention_params(
        layers_[0], bounds(n, layout_.max_seqs, std::min<int64_t>(B, layout_.max_seq_positions)));
    const size_t staging = attention_prefill_staging_bytes(ap);
    if (staging > 0) {
      prefill_staging_ = DeviceBuffer(allocator_, staging);
      ap.prefill_staging = prefill_staging_.data();
      ap.prefill_staging_bytes = staging;
      if (attention_hopper_prefill_reason(ap) != nullptr) prefill_staging_ = DeviceBuffer();
    }
  }
  stream_.synchronize();
}

// The matmul() calls of a layer's projections and of the classifier exactly as enqueue_layer /
// enqueue_step make them (same matrices, input and output buffers, strides, hence the same GEMM cache
// keys), at the smallest n of every GEMM bucket up to max_batch. Inputs are the zeroed scratch; outputs
// land in scratch that every step writes before reading. Layer 0 stands for all: every layer has the
// same shapes and the buffers are shared. Then the prefill graphs of every bucket are captured
// (cuda_llama_prefill_graph.cpp), with every algorithm they launch already chosen.
void CudaLlamaForward::warm_up_matmuls() {
  if (layout_.max_batch <= kGemvMaxTokens || layers_.empty()) return;
  settle_queued_step();  // graph captures below must not start behind a step nobody waited for
  DeviceGuard guard(layout_.device);
  cudaStream_t s = stream_.get();
  for (DeviceBuffer* b : {&xn_, &attn_, &gu_, &tmp_}) GA_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->size(), s));
  for (const int64_t n : gemm_bucket_warm_up_tokens(kGemvMaxTokens + 1, layout_.max_batch)) warm_up_matmuls_at(n);
  stream_.synchronize();
  gemms_warm_ = true;
  for (const int64_t bucket : prefill_graph_buckets()) capture_prefill_graph(bucket);
}

void CudaLlamaForward::warm_up_matmuls_at(int64_t n) {
  const DeviceLayer& L = layers_[0];
  float* const qkv = qkv_.as<float>();
  const float* const h = xn_.as<float>();
  if (L.wqkv.rows > 0) {
    matmul(L.wqkv, h, ld_embd_, n, qkv, ld_qkv_);
  } else {
    if (L.wqk.rows > 0) {
      matmul(L.wqk, h, ld_embd_, n, qkv, ld_qkv_);
    } else {
      matmul(L.wq, h, ld_embd_, n, qkv, ld_qkv_);
      matmul(L.wk, h, ld_embd_, n, qkv + q_dim_, ld_qkv_);
    }
    matmul(L.wv, h, ld_embd_, n, qkv + q_dim_ + kv_dim_, ld_qkv_);
  }
  matmul(L.wo, attn_.as<float>(), ld_q_, n, tmp_.as<float>(), ld_embd_);
  float* const gate = gu_.as<float>();
  if (L.w_gate_up.rows > 0) {
    matmul(L.w_gate_up, h, ld_embd_, n, gate, ld_gu_);
  } else {
    matmul(L.w_gate, h, ld_embd_, n, gate, ld_gu_);
    matmul(L.w_up, h, ld_embd_, n, gate + c_.n_ff, ld_gu_);
  }
  matmul(L.w_down, gate, ld_gu_, n, tmp_.as<float>(), ld_embd_);
  // the classifier of more than 8 rows: contiguous rows of xn_ or gathered rows of tmp_ (same strides)
  matmul(output_, h, ld_embd_, n, logits_.as<float>(), c_.n_vocab);
  matmul(output_, tmp_.as<float>(), ld_embd_, n, logits_.as<float>(), c_.n_vocab);
}

}  // namespace ga::cuda::llama

namespace ga::cuda {

// matmul() sends steps of up to kGemvMaxTokens tokens to the GEMV (one instantiation per token count
// class) and attention takes its decode kernel up to the same bound: every n up to it. Longer steps run
// the same kernels of ours at any n (the GEMM's algorithms are warm_up_matmuls'): the smallest and the
// largest step.
std::vector<int64_t> warm_up_step_tokens(int64_t max_step_tokens) {
  std::vector<int64_t> out;
  for (int64_t n = 1; n <= std::min<int64_t>(max_step_tokens, kGemvMaxTokens); ++n) out.push_back(n);
  if (max_step_tokens > kGemvMaxTokens) out.push_back(kGemvMaxTokens + 1);
  if (max_step_tokens > kGemvMaxTokens + 1) out.push_back(max_step_tokens);
  return out;
}

}  // namespace ga::cuda
