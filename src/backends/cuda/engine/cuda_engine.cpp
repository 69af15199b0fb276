// CudaEngine: construction (the Program's handles, fit check, KV pool sizing, upload, allocation); see the
// header.
//
// Order: the Program is built first, against handles only (the Binder records which tensors, buffers, RoPE
// tables and KV layers it asks for; nothing is on the device yet), so that every byte the engine will need
// is known before anything is allocated: the weights it uses, its activations, the staging of its largest
// products, the attention workspace of its layers. Then the paged pool's size is one division of what is
// left ("as many blocks as fit"), an explicit size that does not fit is refused with every byte count, and
// only then are the weights uploaded and the state allocated.
//
// Why the step is enqueued the way it is:
//  * The residual stream is only ever updated by the fused residual + RMSNorm op: a block's output is added
//    to the stream by the *next* norm, so each sub-layer boundary is one kernel and one pass over [n][n_embd].
//  * Everything a step reads from the host is in one device buffer, so the one-token step is
//    position-independent and captured once as a CUDA graph; other steps are enqueued directly because their
//    shapes vary and cuBLAS picks kernels per shape.
//  * The prefill of quantized weights dequantizes each matrix into one f16 scratch and runs a cuBLAS GEMM on
//    it (simple and tensor-core fast, at the price of writing the matrix once in f16 per step).
#include "backends/cuda/engine/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/engine/engine_kernels.h"
#include "backends/cuda/moe_prefill.h"
#include "gpu_accel/error.h"

#ifndef GA_CUDA_ARCHS_STR
#define GA_CUDA_ARCHS_STR "?"
#endif

namespace ga::cuda::engine {
namespace {

constexpr uint64_t kTensorAlign = 256;
constexpr uint64_t kTensorPad = 16;  // decoders may read a few bytes past a tensor's last block
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr int64_t kMaxSlots = (int64_t{1} << 31) - 1;  // KV pool rows: slots are int32 in the step metadata
constexpr double kMiB = 1024.0 * 1024.0;
constexpr uint64_t kGemmWorkspace = uint64_t{32} << 20;  // the cuBLAS workspace
constexpr int64_t kMoeGroupedPrefillMinExperts = 32;  // experts per layer from which prefill takes the grouped GEMM

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
int64_t ld4(int64_t n) { return (n + 3) / 4 * 4; }  // float4-friendly row stride

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

const WeightView* find_view(const LoadedModel& model, std::string_view name) {
  const auto it = model.weights.find(name);
  return it == model.weights.end() ? nullptr : &it->second;
}

uint64_t matrix_bytes(const DeviceMatrix& m) {
  return static_cast<uint64_t>(m.rows * m.n_expert) * static_cast<uint64_t>(m.row_bytes);
}

}  // namespace

// ---- Binder ----

step::Weight CudaEngine::find_matrix(std::string_view name) {
  if (const auto it = weight_ids_.find(name); it != weight_ids_.end()) return step::Weight{it->second};
  const WeightView* w = find_view(*model_, name);
  if (w == nullptr) return {};
  GA_CHECK(w->ne.size() >= 2 && w->ne.size() <= 3, InvalidFormat, "tensor ", name, " has ", w->ne.size(),
           " dimensions; a matrix has 2 (an expert stack 3)");
  WeightEntry e;
  e.name = std::string(name);
  e.m.type = w->type;
  e.m.cols = w->cols();
  e.m.rows = w->rows();
  e.m.n_expert = w->ne.size() == 3 ? static_cast<int64_t>(w->ne[2]) : 1;
  e.m.row_bytes = static_cast<int64_t>(row_bytes(e.m.type, static_cast<uint64_t>(w->cols())));
  // The split layout serves one matrix GEMVs; expert stacks stay in the GGUF layout their kernels read.
  // (not with the persistent decode kernel, which reads the GGUF order)
  e.m.layout = e.m.n_expert == 1 && layout_.decode_kernel == DecodeKernel::kPerOp &&
                       gemv_prefers_split_rows(w->type, e.m.cols)
                   ? WeightLayout::kSplitRows
                   : WeightLayout::kGguf;
  weights_table_.push_back(std::move(e));
  const auto id = static_cast<int32_t>(weights_table_.size() - 1);
  weight_ids_.emplace(std::string(name), id);
  return step::Weight{id};
}

step::Weight CudaEngine::matrix(std::string_view name) {
  const step::Weight w = find_matrix(name);
  GA_CHECK(static_cast<bool>(w), InvalidFormat, "model '", c_.name, "' has no tensor ", name);
  return w;
}

step::Vec CudaEngine::find_vector(std::string_view name) {
  if (const auto it = vector_ids_.find(name); it != vector_ids_.end()) return step::Vec{it->second};
  const WeightView* w = find_view(*model_, name);
  if (w == nullptr) return {};
  vectors_.push_back(VectorEntry{std::string(name), vector_f32(*w), nullptr});
  const auto id = static_cast<int32_t>(vectors_.size() - 1);
  vector_ids_.emplace(std::string(name), id);
  return step::Vec{id};
}

step::Vec CudaEngine::vector(std::string_view name) {
  const step::Vec v = find_vector(name);
  GA_CHECK(static_cast<bool>(v), InvalidFormat, "model '", c_.name, "' has no tensor ", name);
  return v;
}

step::Buf CudaEngine::buffer(int64_t cols) {
  GA_CHECK(cols > 0, Internal, "an activation buffer needs columns");
  buffers_.push_back(BufferEntry{cols, ld4(cols), {}});
  return step::Buf{static_cast<int32_t>(buffers_.size() - 1)};
}

step::Rope CudaEngine::rope(const step::RopeTable& table) {
  GA_CHECK(table.n_rot > 0 && table.n_rot % 2 == 0 && static_cast<int64_t>(table.inv_freq.size()) == table.n_rot / 2,
           Internal, "RoPE table of ", table.inv_freq.size(), " frequencies for ", table.n_rot, " dims");
  ropes_.push_back(RopeEntry{table, {}});
  return step::Rope{static_cast<int32_t>(ropes_.size() - 1)};
}

step::Kv CudaEngine::kv(int64_t kv_layer) {
  GA_CHECK(kv_layer >= 0 && kv_layer < static_cast<int64_t>(kv_layers_.size()), Internal, "KV layer ", kv_layer,
           " of ", kv_layers_.size());
  return step::Kv{static_cast<int32_t>(kv_layer)};
}

// ---- sizes ----

struct CudaEngine::Sizes {
  uint64_t weights = 0;
  uint64_t kv = 0;
  uint64_t scratch = 0;
  int64_t max_cols = 0;        // the widest matrix input (GEMM x staging)
  uint64_t max_dequant = 0;    // elements of the largest matrix a prefill dequantizes
};

// Whether the prefill multiplies m with cuBLASLt's block-scaled FP8 GEMM (matmul_fp8) rather than dequantizing it:
// F8_B128 split rows, one matrix, whole groups of 4 rows, on a GPU with the FP8 GEMM.
bool CudaEngine::uses_fp8_gemm(const DeviceMatrix& m) const {
  return gemm_->supports_fp8() && m.type == DType::F8_B128 && m.layout == WeightLayout::kSplitRows &&
         m.n_expert == 1 && m.rows % 4 == 0;
}

// Bytes of x8_: the FP8 tensor-core GEMV of F8_B128 split rows reads x rounded once per call (run_gemv), for up
// to kGemvMaxTokens tokens of the widest such matrix; 0 without such matrices or on GPUs without FP8 mma (below
// sm_89: the f16 kernel reads x itself).
uint64_t CudaEngine::x8_bytes() const {
  int64_t cols = 0;
  for (const WeightEntry& e : weights_table_) {
    if (e.m.type == DType::F8_B128 && e.m.layout == WeightLayout::kSplitRows) cols = std::max(cols, e.m.cols);
  }
  return fp8_mma_ && cols > 0 ? static_cast<uint64_t>(gemv_x_e4m3x2_bytes(cols, kGemvMaxTokens)) : 0;
}

// Bytes of m's FP8 GEMM scales ([cols / 128][rows] floats), 0 when it has none.
uint64_t CudaEngine::fp8_gemm_scale_bytes(const DeviceMatrix& m) const {
  return uses_fp8_gemm(m) ? align_up(static_cast<uint64_t>(m.rows * (m.cols / 128)) * 4, kTensorAlign) : 0;
}

uint64_t CudaEngine::kv_slot_bytes(const step::KvLayerSpec& spec) const {
  const uint64_t values = static_cast<uint64_t>(spec.n_head_kv * spec.head_dim);
  return fp8_kv() ? 2 * (values + static_cast<uint64_t>(spec.n_head_kv) * sizeof(float)) : 2 * values * sizeof(__half);
}

uint64_t CudaEngine::kv_layer_bytes(const step::KvLayerSpec& spec, int64_t n_slots) const {
  const uint64_t slots = static_cast<uint64_t>(n_slots);
  const uint64_t values = slots * static_cast<uint64_t>(spec.n_head_kv * spec.head_dim);
  if (!fp8_kv()) return 2 * align_up(values * sizeof(__half), kKvPlaneAlign);
  return 2 * align_up(values, kKvPlaneAlign) +
         2 * align_up(slots * static_cast<uint64_t>(spec.n_head_kv) * sizeof(float), kKvPlaneAlign);
}

CudaEngine::Sizes CudaEngine::plan_sizes() const {
  Sizes s;
  for (const WeightEntry& e : weights_table_) {
    s.max_cols = std::max(s.max_cols, e.m.cols);
    // an expert stack's products run one expert at a time
    if (!is_float_type(e.m.type) && !uses_fp8_gemm(e.m)) {
      s.max_dequant = std::max<uint64_t>(s.max_dequant, e.m.rows * e.m.cols);
    }
    s.weights += align_up(matrix_bytes(e.m) + kTensorPad, kTensorAlign) + fp8_gemm_scale_bytes(e.m);
  }
  for (const FusedRun& f : fused_) {
    if (!is_float_type(f.m.type) && !uses_fp8_gemm(f.m)) {
      s.max_dequant = std::max<uint64_t>(s.max_dequant, f.m.rows * f.m.cols);
    }
    s.weights += fp8_gemm_scale_bytes(f.m);
  }
  s.scratch += x8_bytes();
  for (const VectorEntry& v : vectors_) s.weights += align_up(v.host.size() * 4 + kTensorPad, kTensorAlign);
  for (const RopeEntry& r : ropes_) s.weights += align_up(r.table.inv_freq.size() * 8, kTensorAlign);
  uint64_t kv_layers = 0;
  for (const KvLayer& l : kv_layers_) kv_layers += kv_layer_bytes(l.spec, n_slots_);
  s.kv = kv_layers +
         static_cast<uint64_t>(n_rec_slots_) * static_cast<uint64_t>(rec_floats_) * 4;  // + recurrent state
  const uint64_t b = static_cast<uint64_t>(layout_.max_batch);
  uint64_t act = 0;
  for (const BufferEntry& e : buffers_) act += static_cast<uint64_t>(e.ld);
  act += static_cast<uint64_t>(ld_embd_) + static_cast<uint64_t>(n_vocab_);  // final_x_, logits_
  s.scratch += b * act * 4 + static_cast<uint64_t>(layout_.max_seqs * ld_embd_) * 4 +
              b * static_cast<uint64_t>(s.max_cols) * 2 + s.max_dequant * 2 +
              static_cast<uint64_t>(metadata_ints()) * 4 + kGemmWorkspace;
  s.scratch += static_cast<uint64_t>(x_int8_scratch_bytes_) + moe_scratch_bytes();
  return s;
}

namespace {

// The MoE shapes the scratch is sized for: every step up to max_batch tokens (route, plan, prefill) and the
// grouped GEMV's steps up to its token bound.
MoeShape moe_shape(int64_t n_tokens, int64_t n_expert, int64_t top_k) {
  MoeShape s;
  s.n_tokens = n_tokens;
  s.n_expert = static_cast<int>(n_expert);
  s.top_k = static_cast<int>(top_k);
  return s;
}

}  // namespace

uint64_t CudaEngine::moe_scratch_bytes() const {
  if (moe_max_experts_ == 0) return 0;
  const int64_t B = layout_.max_batch, E = moe_max_experts_, K = moe_max_top_k_;
  const int64_t ff = c_.transformer.n_ff_exp;
  const uint64_t route = static_cast<uint64_t>(B * E) * 4 + 2 * static_cast<uint64_t>(B * K) * 4;
  const uint64_t plan = static_cast<uint64_t>(moe_plan_bytes(moe_shape(B, E, K)));
  const uint64_t gemv = static_cast<uint64_t>(moe_ffn_gemv_workspace_bytes(
      moe_shape(std::min<int64_t>(B, kMoeRouteFusedMaxTokens), E, K), c_.n_embd, ff));
  return route + plan + gemv + static_cast<uint64_t>(moe_prefill_bytes());
}

int64_t CudaEngine::moe_prefill_bytes() const {
  const int64_t B = layout_.max_batch;
  if (moe_max_experts_ == 0 || B <= kMoeRouteFusedMaxTokens) return 0;
  const MoeShape shape = moe_shape(B, moe_max_experts_, moe_max_top_k_);
  const int64_t ff = c_.transformer.n_ff_exp;
  if (!moe_prefill_grouped_) return moe_prefill_workspace_bytes(shape, c_.n_embd, ff);
  // The grouped GEMM dequantizes every expert of a quantized stack into the workspace (one layer at a time).
  MoePrefillParams p;
  p.shape = shape;
  const DType t = moe_stacks_all_f16_ ? DType::F16 : DType::Q8_0;
  p.gate = MoeExperts{t, nullptr, ff, c_.n_embd, 0, 0};
  p.up = p.gate;
  p.down = MoeExperts{t, nullptr, c_.n_embd, ff, 0, 0};
  return moe_prefill_graph_workspace_bytes(p);
}

void CudaEngine::check_weight_types() const {
  // Every matrix must be readable by the GEMV (decode) and the embedding gather; say which is not.
  for (const WeightEntry& e : weights_table_) {
    GA_CHECK(gemv_supports(e.m.type) && engine::dequantize_f16_supports(e.m.type), Unsupported, "tensor ", e.name,
             " has type ", dtype_name(e.m.type),
             ", which the CUDA kernels do not read yet (supported: " GA_CUDA_WEIGHT_TYPES ")");
  }
}

CudaEngine::CudaEngine(const LoadedModel& model, const step::ProgramFactory& factory, const EngineLayout& layout)
    : c_(model.config), layout_(layout), allocator_(layout.device), stream_(layout.device) {
  DeviceGuard guard(layout.device);
  GA_CHECK(c_.shard.world == 1, Unsupported, "tensor parallelism on the GPU is not implemented yet (rank ",
           c_.shard.rank, " of a ", c_.shard.world, "-rank shard)");
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
  n_vocab_ = c_.n_vocab;
  ld_embd_ = ld4(c_.n_embd);
  table_stride_ = layout_.paged ? (layout_.max_seq_positions + layout_.block_size - 1) / layout_.block_size : 0;

  // The Program, against handles: what it needs decides every size below.
  state_ = factory.state();
  // Recurrent models (RWKV): per-sequence state slots (cuda_engine_recurrent.cpp). Their prompt steps run
  // enqueued: a prefill graph's padding rows would run through the recurrence and land in the state.
  size_recurrent_state();
  if (!state_.recurrent.empty()) prefill_graphs_allowed_ = false;
  weight_groups_ = factory.weight_groups();
  for (const step::KvLayerSpec& spec : state_.kv_layers) {
    GA_CHECK(spec.n_head_kv > 0 && spec.head_dim > 0 && spec.n_head % spec.n_head_kv == 0, Internal,
             "KV layer of ", spec.n_head, " / ", spec.n_head_kv, " heads of ", spec.head_dim);
    kv_layers_.push_back(KvLayer{spec, nullptr, nullptr});
  }
  model_ = &model;
  program_ = factory.build(*this);
  check_weight_types();
  // The groups the upload places back to back: every member a 2-D matrix of one type and width the Program
  // uses, or the leading members that are (q and k when only v's type differs, as Q4_K_M files have it).
  for (const std::vector<std::string>& g : weight_groups_) {
    std::vector<int32_t> members;
    for (const std::string& name : g) {
      const auto it = weight_ids_.find(name);
      if (it == weight_ids_.end()) break;
      const DeviceMatrix& m = weights_table_[static_cast<size_t>(it->second)].m;
      const DeviceMatrix& first =
          members.empty() ? m : weights_table_[static_cast<size_t>(members.front())].m;
      if (m.n_expert != 1 || m.type != first.type || m.cols != first.cols) break;
      members.push_back(it->second);
    }
    if (members.size() < 2) continue;
    FusedRun f;
    f.first = members.front();
    f.count = static_cast<int32_t>(members.size());
    f.members = members;
    f.m = weights_table_[static_cast<size_t>(members.front())].m;
    f.m.rows = 0;
    for (const int32_t id : members) f.m.rows += weights_table_[static_cast<size_t>(id)].m.rows;
    f.m.layout = layout_.decode_kernel == DecodeKernel::kPerOp && gemv_prefers_split_rows(f.m.type, f.m.cols)
                     ? WeightLayout::kSplitRows
                     : WeightLayout::kGguf;
    fused_.push_back(f);
  }
  model_ = nullptr;
  // Expert stacks: the MoE scratch, sized by the model's routing, and the prefill path by the experts' shape.
  // Many small experts (Qwen3-30B-A3B: 128 of n_ff 768, 512 tokens give each ~32 rows) leave cuBLAS per expert
  // launch-bound (10.5 TFLOP/s against the grouped GEMM's 54, docs/performance.md); few large ones (Mixtral: 8
  // of 14336, ~128 rows each) run at 324 TFLOP/s through cuBLAS against 106. The per-expert path reads the
  // routing's counts on the host, so with it the prefill steps run without graphs. GA_MOE_PREFILL=grouped |
  // per-expert overrides the choice (benchmarks).
  for (const WeightEntry& e : weights_table_) {
    if (e.m.n_expert > 1) {
      moe_max_experts_ = std::max(moe_max_experts_, e.m.n_expert);
      moe_max_top_k_ = std::max<int64_t>(moe_max_top_k_, c_.transformer.n_expert_used);
      moe_stacks_all_f16_ = moe_stacks_all_f16_ && e.m.type == DType::F16;
    }
  }
  if (moe_max_experts_ > 0) {
    const int64_t ff = c_.transformer.n_ff_exp;
    const bool grouped_fits = c_.n_embd % 64 == 0 && ff % 64 == 0;
    moe_prefill_grouped_ = grouped_fits && moe_max_experts_ >= kMoeGroupedPrefillMinExperts;
    if (const char* env = std::getenv("GA_MOE_PREFILL"); env != nullptr && *env != '\0') {
      const std::string_view v(env);
      GA_CHECK(v == "grouped" || v == "per-expert", InvalidArgument, "GA_MOE_PREFILL=", v,
               ": expected grouped or per-expert");
      GA_CHECK(v != "grouped" || grouped_fits, Unsupported,
               "GA_MOE_PREFILL=grouped: the grouped GEMM needs n_embd and n_ff multiples of 64");
      moe_prefill_grouped_ = v == "grouped";
    }
    if (!moe_prefill_grouped_) prefill_graphs_allowed_ = false;
  }
  if (moe_max_experts_ > 0) {
    const MoeShape probe = moe_shape(1, moe_max_experts_, moe_max_top_k_);
    const char* why = moe_shape_unsupported_reason(probe);
    GA_CHECK(why == nullptr, Unsupported, "the CUDA MoE kernels do not take ", moe_max_experts_, " experts, top ",
             moe_max_top_k_, ": ", why);
  }

  // The int8 GEMV's rounded x: for the widest input among the matrices the Program uses.
  if (layout_.int8_activations != Int8Activations::kInGemv) {
    int64_t widest = 0;
    for (const WeightEntry& e : weights_table_) widest = std::max(widest, e.m.cols);
    x_int8_scratch_bytes_ = gemv_x_int8_bytes(widest, std::min<int64_t>(layout_.max_batch, kGemvMaxTokens));
  }

  const CudaDeviceInfo info = device_info(layout.device);
  fp8_mma_ = 10 * info.cc_major + info.cc_minor >= 89;
  size_t free_bytes = 0, total_bytes = 0;
  GA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // before the sizing: whether the prefill has the FP8 GEMM decides what plan_sizes counts (its workspace is in
  // the plan's scratch, kGemmWorkspace)
  gemm_ = std::make_unique<Gemm>(allocator_, stream_.get());
  // one block's bytes (codes and scales of an FP8 cache: ~half of F16's), the planes' alignment aside
  uint64_t kv_per_slot = 0;
  for (const KvLayer& l : kv_layers_) kv_per_slot += kv_slot_bytes(l.spec);
  const uint64_t block_bytes = kv_per_slot * static_cast<uint64_t>(layout_.block_size);
  if (layout_.n_blocks == 0) {  // paged, automatic: what is left after weights and scratch
    n_slots_ = 0;
    const Sizes fixed = plan_sizes();
    const uint64_t taken = fixed.weights + fixed.scratch + fixed.kv;  // kv: the recurrent state alone here
    const uint64_t rest = free_bytes > taken ? free_bytes - taken : 0;
    int64_t fit = block_bytes == 0 ? kMaxSlots / layout_.block_size
                                   : static_cast<int64_t>(static_cast<double>(rest) * layout_.kv_memory_fraction /
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
  if (layout_.paged) n_rec_slots_ = std::min(n_rec_slots_, layout_.n_blocks);
  const Sizes s = plan_sizes();
  const uint64_t needed = s.weights + s.kv + s.scratch;
  GA_CHECK(needed <= free_bytes, OutOfMemory, "the model does not fit on cuda:", layout.device, " (", info.name,
           "): weights ", static_cast<double>(s.weights) / kMiB, " MiB + KV cache (", n_slots_, " positions, ",
           fp8_kv() ? "fp8" : "f16", ") ",
           static_cast<double>(s.kv) / kMiB, " MiB + scratch ", static_cast<double>(s.scratch) / kMiB,
           " MiB = ", static_cast<double>(needed) / kMiB, " MiB, but only ", static_cast<double>(free_bytes) / kMiB,
           " MiB of ", static_cast<double>(total_bytes) / kMiB, " MiB are free (reduce the context or use a smaller "
           "quantization)");

  upload_weights(model);
  allocate_state();
  device_bytes_ = needed;
  kv_bytes_ = s.kv;
  if (layout_.decode_kernel == DecodeKernel::kPersistent) build_persistent_plan();
  if (layout_.paged && layout_.use_cuda_graph) {  // every decode batch size, now (header: why)
    for (int64_t n = 1; n <= layout_.max_seqs; ++n) capture_graph(decode_shape(n));
  }

  const int binary = engine::kernel_binary_version();
  description_ = str("cuda:", layout.device, " ", info.name, " (sm_", info.cc_major, info.cc_minor, ", ",
                     info.sm_count, " SMs), ", factory.name(), ", kernels sm_",
                     binary >= 0 ? std::to_string(binary) : std::string("?"), " (built for ", GA_CUDA_ARCHS_STR,
                     "), ", static_cast<double>(needed) / kMiB, " MiB on device");
  // Which attention kernels the steps take: a refused sizing probe (allocate_state) would leave them on the
  // simple fallback, correct and several times slower, so it is said here and checked by the GPU tests.
  if (kv_layers_.empty()) {
    description_ += ", no attention layers";
  } else {
    description_ += decode_attention_tuned_ ? str(", decode attention: split-KV (workspace ",
                                                  static_cast<double>(attn_workspace_bytes_) / kMiB, " MiB)")
                                            : str(", decode attention: simple (", decode_attention_refusal_, ")");
  }
  if (n_rec_slots_ > 0) {
    description_ += str(", recurrent state ", n_rec_slots_, " x ", static_cast<double>(rec_floats_ * 4) / kMiB, " MiB");
  }
  if (moe_max_experts_ > 0) {
    description_ += moe_prefill_grouped_ ? ", MoE prefill: grouped GEMM" : ", MoE prefill: cuBLAS per expert";
  }
  if (!kv_layers_.empty()) {
    description_ += prefill_staging_.data() != nullptr ? ", prefill attention: Hopper flash (sm_90a)"
                                                       : ", prefill attention: mma.sync";
  }
  prefill_stats_.max_tokens = prefill_graphs_allowed_ ? layout_.prefill_graph_max_tokens : 0;
  if (persistent_.ready) {
    description_ += ", decode: persistent kernel (" + persistent_.plan.summary + ")";
  } else if (layout_.decode_kernel == DecodeKernel::kPersistent) {
    description_ += ", decode: per-op (the persistent kernel refused: " + persistent_.refusal + ")";
  }
  if (layout_.paged) {
    description_ += str(", KV pool ", layout_.n_blocks, " x ", layout_.block_size, " positions ", fp8_kv() ? "fp8" : "f16",
                        " (", static_cast<double>(s.kv) / kMiB, " MiB)");
  } else {
    description_ += str(", KV cache ", n_slots_, " positions ", fp8_kv() ? "fp8" : "f16", " (",
                        static_cast<double>(s.kv) / kMiB, " MiB)");
  }
}

std::string CudaEngine::description() const {
  const PrefillGraphStats& g = prefill_stats_;
  if (g.max_tokens <= 0) return description_ + ", prefill graphs off";
  return description_ + str(", prefill graphs <= ", g.max_tokens, " tokens: ", g.captured, " captured in ",
                            g.capture_seconds * 1e3, " ms, ", static_cast<double>(g.device_bytes) / kMiB, " MiB");
}

CudaEngine::~CudaEngine() {
  // A step left queued (forward_device_queued) whose sampling threw before its synchronize may still read the
  // staging and scratch memory freed below: wait for it (a destructor reports nothing; the error stays with the stream).
  try {
    settle_queued_step();
  } catch (...) {
  }
  write_persistent_trace();
  destroy_graphs();
  if (host_staging_ != nullptr) (void)cudaFreeHost(host_staging_);
  if (host_logits_ != nullptr) (void)cudaFreeHost(host_logits_);
  (void)cudaGetLastError();
}

void CudaEngine::upload_weights(const LoadedModel& model) {
  const Sizes s = plan_sizes();
  weights_ = DeviceBuffer(allocator_, s.weights);
  GA_CUDA_CHECK(cudaMemsetAsync(weights_.data(), 0, s.weights, stream_.get()));  // the padding reads as zeros
  uint8_t* base = weights_.as<uint8_t>();
  uint64_t offset = 0;
  std::vector<bool> placed(weights_table_.size(), false);
  const auto copy = [&](const WeightEntry& e, uint8_t* dst) {
    const WeightView& w = model.weights.at(e.name);
    GA_CUDA_CHECK(cudaMemcpyAsync(dst, w.data, w.nbytes, cudaMemcpyHostToDevice, stream_.get()));
  };
  // Fused groups first, members back to back (no padding between them: the group is one matrix), the group
  // padded as one tensor. A group needs no more room than its members apart.
  for (FusedRun& f : fused_) {
    uint64_t bytes = 0;
    for (const int32_t id : f.members) {
      WeightEntry& e = weights_table_[static_cast<size_t>(id)];
      copy(e, base + offset + bytes);
      e.m.data = base + offset + bytes;
      placed[static_cast<size_t>(id)] = true;
      bytes += matrix_bytes(e.m);
    }
    f.m.data = base + offset;
    offset += align_up(bytes + kTensorPad, kTensorAlign);
  }
  for (size_t i = 0; i < weights_table_.size(); ++i) {
    if (placed[i]) continue;
    WeightEntry& e = weights_table_[i];
    copy(e, base + offset);
    e.m.data = base + offset;
    offset += align_up(matrix_bytes(e.m) + kTensorPad, kTensorAlign);
  }
  for (VectorEntry& v : vectors_) {
    GA_CUDA_CHECK(cudaMemcpyAsync(base + offset, v.host.data(), v.host.size() * 4, cudaMemcpyHostToDevice,
                                  stream_.get()));
    v.data = reinterpret_cast<const float*>(base + offset);
    offset += align_up(v.host.size() * 4 + kTensorPad, kTensorAlign);
  }
  for (RopeEntry& r : ropes_) {
    const size_t bytes = r.table.inv_freq.size() * sizeof(double);
    r.inv_freq = DeviceBuffer(allocator_, bytes);
    GA_CUDA_CHECK(cudaMemcpyAsync(r.inv_freq.data(), r.table.inv_freq.data(), bytes, cudaMemcpyHostToDevice,
                                  stream_.get()));
  }
  // One-time reordering of each row's bytes where the decode GEMV reads the split layout faster
  // (weight_layout.h); every reader is given the matrix's layout. A fused group is relaid as one matrix.
  for (const FusedRun& f : fused_) {
    if (f.m.layout != WeightLayout::kSplitRows) continue;
    GA_CUDA_CHECK(split_rows_in_place(f.m.type, const_cast<uint8_t*>(f.m.data), f.m.rows, f.m.cols, f.m.row_bytes,
                                      stream_.get()));
  }
  for (size_t i = 0; i < weights_table_.size(); ++i) {
    const DeviceMatrix& m = weights_table_[i].m;
    if (m.layout != WeightLayout::kSplitRows || placed[i]) continue;
    GA_CUDA_CHECK(split_rows_in_place(m.type, const_cast<uint8_t*>(m.data), m.rows, m.cols, m.row_bytes,
                                      stream_.get()));
  }
  prepare_f8_gemm_scales();
  stream_.synchronize();  // the host vectors may go
  for (VectorEntry& v : vectors_) v.host.shrink_to_fit();
}

// The FP8 prefill GEMM (gemm.h) reads F8_B128 split rows' codes in place and their scales transposed: one array
// per matrix (fused groups included), 1/32 of the codes' bytes, all in one buffer. Where the GPU has no
// block-scaled FP8 GEMM the prefill dequantizes to f16 as for the other quant types.
void CudaEngine::prepare_f8_gemm_scales() {
  std::vector<DeviceMatrix*> matrices;
  for (WeightEntry& e : weights_table_) matrices.push_back(&e.m);
  for (FusedRun& f : fused_) matrices.push_back(&f.m);
  uint64_t total = 0;
  for (const DeviceMatrix* m : matrices) total += fp8_gemm_scale_bytes(*m);
  if (total == 0) return;
  f8_gemm_scales_ = DeviceBuffer(allocator_, static_cast<size_t>(total));
  uint64_t offset = 0;
  for (DeviceMatrix* m : matrices) {
    if (!uses_fp8_gemm(*m)) continue;
    auto* out = reinterpret_cast<float*>(f8_gemm_scales_.as<uint8_t>() + offset);
    GA_CUDA_CHECK(::ga::cuda::detail::split_rows_f8_gemm_scales(m->data, m->rows, m->cols, m->row_bytes, out, stream_.get()));
    m->f8_scales = out;
    offset += fp8_gemm_scale_bytes(*m);
  }
}

void CudaEngine::allocate_state() {
  const int64_t B = layout_.max_batch;
  for (BufferEntry& e : buffers_) {
    e.mem = DeviceBuffer(allocator_, static_cast<size_t>(B * e.ld) * 4);
    GA_CUDA_CHECK(cudaMemsetAsync(e.mem.data(), 0, e.mem.size(), stream_.get()));  // padded rows read as zeros
  }
  final_x_ = DeviceBuffer(allocator_, static_cast<size_t>(B * ld_embd_) * 4);
  final_rows_ = DeviceBuffer(allocator_, static_cast<size_t>(layout_.max_seqs * ld_embd_) * 4);
  if (x_int8_scratch_bytes_ > 0) xq_ = DeviceBuffer(allocator_, static_cast<size_t>(x_int8_scratch_bytes_));
  if (moe_max_experts_ > 0) {
    const int64_t E = moe_max_experts_, K = moe_max_top_k_, ff = c_.transformer.n_ff_exp;
    moe_logits_ = DeviceBuffer(allocator_, static_cast<size_t>(B * E) * 4);
    moe_ids_ = DeviceBuffer(allocator_, static_cast<size_t>(B * K) * 4);
    moe_weights_ = DeviceBuffer(allocator_, static_cast<size_t>(B * K) * 4);
    moe_plan_ = DeviceBuffer(allocator_, static_cast<size_t>(moe_plan_bytes(moe_shape(B, E, K))));
    moe_gemv_workspace_ = DeviceBuffer(
        allocator_, static_cast<size_t>(moe_ffn_gemv_workspace_bytes(
                        moe_shape(std::min<int64_t>(B, kMoeRouteFusedMaxTokens), E, K), c_.n_embd, ff)));
    if (const int64_t bytes = moe_prefill_bytes(); bytes > 0) {
      moe_prefill_workspace_ = DeviceBuffer(allocator_, static_cast<size_t>(bytes));
    }
  }
  logits_ = DeviceBuffer(allocator_, static_cast<size_t>(B * n_vocab_) * 4);
  const size_t meta_bytes = static_cast<size_t>(metadata_ints()) * 4;
  step_in_ = DeviceBuffer(allocator_, meta_bytes);
  GA_CUDA_CHECK(cudaMemsetAsync(step_in_.data(), 0, meta_bytes, stream_.get()));  // block tables start valid
  GA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_staging_), meta_bytes));
  std::memset(host_staging_, 0, meta_bytes);
  if (layout_.paged) {
    GA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_logits_),
                                 static_cast<size_t>(layout_.max_seqs * n_vocab_) * 4));
  }

  int64_t max_cols = 0;
  uint64_t max_dequant = 0;
  const auto consider = [&](const DeviceMatrix& m) {
    max_cols = std::max(max_cols, m.cols);
    if (!is_float_type(m.type) && !uses_fp8_gemm(m)) {  // (the FP8 GEMM's matrices never dequantize: matmul_fp8)
      max_dequant = std::max<uint64_t>(max_dequant, static_cast<uint64_t>(m.rows * m.cols));
    }
  };
  for (const WeightEntry& e : weights_table_) consider(e.m);
  for (const FusedRun& f : fused_) consider(f.m);
  if (const uint64_t bytes = x8_bytes(); bytes > 0) x8_ = DeviceBuffer(allocator_, static_cast<size_t>(bytes));
  if (B > kGemvMaxTokens) {  // only a GEMM needs the staging buffers
    x_stage_ = DeviceBuffer(allocator_, static_cast<size_t>(B * max_cols) * 2);
    if (max_dequant > 0) w_stage_ = DeviceBuffer(allocator_, max_dequant * 2);
  }

  // [n_slots][kv_dim] f16 per layer, K then V (FP8: codes K, V, then scales [n_slots][n_head_kv] K, V). Zeroed: a
  // slot never written reads as 0, not NaN.
  size_t kv_total = 0;
  for (const KvLayer& l : kv_layers_) kv_total += static_cast<size_t>(kv_layer_bytes(l.spec, n_slots_));
  // The recurrent state slots (zeroed, though a fresh sequence never reads them: its runs start at position 0).
  if (n_rec_slots_ > 0) {
    rec_ = DeviceBuffer(allocator_, static_cast<size_t>(n_rec_slots_ * rec_floats_) * 4);
    GA_CUDA_CHECK(cudaMemsetAsync(rec_.data(), 0, rec_.size(), stream_.get()));
    if (layout_.paged) block_slot_.assign(static_cast<size_t>(layout_.n_blocks), -1);
    slot_block_.assign(static_cast<size_t>(n_rec_slots_), -1);
    slot_pos_.assign(static_cast<size_t>(n_rec_slots_), 0);
    slot_used_.assign(static_cast<size_t>(n_rec_slots_), 0);
  }
  kv_ = DeviceBuffer(allocator_, kv_total);
  GA_CUDA_CHECK(cudaMemsetAsync(kv_.data(), 0, kv_.size(), stream_.get()));
  size_t kv_offset = 0;
  for (KvLayer& l : kv_layers_) {
    uint8_t* const base = kv_.as<uint8_t>() + kv_offset;
    const size_t values = static_cast<size_t>(n_slots_ * l.spec.n_head_kv * l.spec.head_dim);
    if (fp8_kv()) {
      const size_t plane = align_up(values, kKvPlaneAlign);
      const size_t scales = align_up(static_cast<size_t>(n_slots_ * l.spec.n_head_kv) * sizeof(float), kKvPlaneAlign);
      l.k8 = base;
      l.v8 = base + plane;
      l.k_scale = reinterpret_cast<float*>(base + 2 * plane);
      l.v_scale = reinterpret_cast<float*>(base + 2 * plane + scales);
    } else {
      const size_t plane = align_up(values * sizeof(__half), kKvPlaneAlign);
      l.k = reinterpret_cast<__half*>(base);
      l.v = reinterpret_cast<__half*>(base + plane);
    }
    kv_offset += static_cast<size_t>(kv_layer_bytes(l.spec, n_slots_));
  }

  // The tuned attention's split-KV workspace, for the largest step it will see, for every distinct layer
  // shape. Contiguous: the decode path takes batches of 1..8 tokens (its split count, hence the workspace,
  // varies with the batch); the prefill path above 8 needs none. Paged: decode-only steps of 1..max_seqs
  // sequences and the largest mixed step. Every size is asked of the parameters the launches use
  // (attention_params) with the paged bound on positions the steps carry (decode_shape, validate_batch: at
  // most max_seq_positions) and no window (a window only shrinks the ranges).
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
  const auto layer_op = [](const KvLayer& l) {
    step::AttentionOp op;
    op.n_head = l.spec.n_head;
    op.n_head_kv = l.spec.n_head_kv;
    op.head_dim = l.spec.head_dim;
    op.scale = 1.0f;
    return op;
  };
  // Sized before asking attention_unsupported_reason: that check also wants the workspace, so asking
  // it first left the workspace empty and sent every decode step to the simple attention.
  // One probe per distinct layer shape (a model's layers share one or two), not per layer: the probe runs at
  // start-up for every step shape.
  std::vector<const KvLayer*> distinct;
  for (const KvLayer& l : kv_layers_) {
    const bool seen = std::any_of(distinct.begin(), distinct.end(), [&](const KvLayer* d) {
      return d->spec.n_head == l.spec.n_head && d->spec.n_head_kv == l.spec.n_head_kv &&
             d->spec.head_dim == l.spec.head_dim;
    });
    if (!seen) distinct.push_back(&l);
  }
  // Every probe's size first, then one stand-in workspace of the largest, so each check sees a workspace of at
  // least its size (one allocation, not one per probe).
  const auto probe = [&](const KvLayer& l, int64_t n, int64_t n_seqs) {
    AttentionParams ap = attention_params(layer_op(l), l, bounds(n, n_seqs, n == n_seqs ? 1 : n));
    ap.workspace = nullptr;
    ap.workspace_bytes = 0;
    return ap;
  };
  size_t stand_in_bytes = 0;
  for (const KvLayer* lp : distinct) {
    for (const auto& [n, n_seqs] : shapes) {
      stand_in_bytes = std::max(stand_in_bytes, attention_workspace_bytes(probe(*lp, n, n_seqs)));
    }
  }
  if (stand_in_bytes > 0) attn_workspace_ = DeviceBuffer(allocator_, stand_in_bytes);
  for (const KvLayer* lp : distinct) {
    const KvLayer& l = *lp;
    for (const auto& [n, n_seqs] : shapes) {
      AttentionParams ap = probe(l, n, n_seqs);
      const size_t bytes = attention_workspace_bytes(ap);
      if (bytes > 0) {
        ap.workspace = attn_workspace_.data();
        ap.workspace_bytes = bytes;
      }
      // A shape may need no workspace (one split); it still runs the tuned kernel.
      if (const char* why = attention_unsupported_reason(ap); why == nullptr) {
        decode_attention_tuned_ = true;
        attn_workspace_bytes_ = std::max(attn_workspace_bytes_, bytes);
      } else if (decode_attention_refusal_.empty()) {
        decode_attention_refusal_ = why;
      }
    }
  }
  if (attn_workspace_bytes_ > 0) {
    attn_workspace_ = DeviceBuffer(allocator_, attn_workspace_bytes_);
    // zero once: the merge counters in it start at zero and every call leaves them so (attention.h)
    GA_CUDA_CHECK(cudaMemsetAsync(attn_workspace_.data(), 0, attn_workspace_bytes_, stream_.get()));
  } else {
    attn_workspace_ = DeviceBuffer();  // no tuned shape: the stand-in goes
  }
  // Staging of the Hopper prefill for the largest step (B tokens; in the paged layout max_seqs runs), kept only
  // when the Hopper kernel takes that step's prefill for every layer shape (attention_hopper_prefill_reason).
  const char* mma_only = std::getenv("GA_ATTN_PREFILL");
  if (!(mma_only != nullptr && std::strcmp(mma_only, "mma") == 0) && !kv_layers_.empty()) {
    const int64_t n = layout_.paged ? B : std::min<int64_t>(B, n_slots_);
    size_t staging = 0;
    for (const KvLayer& l : kv_layers_) {
      const AttentionParams ap = attention_params(
          layer_op(l), l, bounds(n, layout_.max_seqs, std::min<int64_t>(B, layout_.max_seq_positions)));
      staging = std::max(staging, attention_prefill_staging_bytes(ap));
    }
    if (staging > 0) {
      prefill_staging_ = DeviceBuffer(allocator_, staging);
      for (const KvLayer& l : kv_layers_) {
        AttentionParams ap = attention_params(
            layer_op(l), l, bounds(n, layout_.max_seqs, std::min<int64_t>(B, layout_.max_seq_positions)));
        if (attention_hopper_prefill_reason(ap) != nullptr) {
          prefill_staging_ = DeviceBuffer();
          break;
        }
      }
    }
  }
  stream_.synchronize();
}

// Every product of the Program (its linear / linear_concat ops, exactly as a step makes them: same matrices,
// buffers and strides, hence the same GEMM cache keys) at the smallest n of every GEMM bucket up to
// max_batch, on the scratch (every other op skipped: the KV cache and any state a later step reads stay
// untouched; outputs land in buffers every step writes before reading). A shape met in many layers runs once.
// Then the prefill graphs of every bucket are captured (cuda_engine_prefill_graph.cpp), with every algorithm
// they launch already chosen.
void CudaEngine::warm_up_matmuls() {
  if (layout_.max_batch <= kGemvMaxTokens) return;
  settle_queued_step();  // graph captures below must not start behind a step nobody waited for
  DeviceGuard guard(layout_.device);
  for (const int64_t n : gemm_bucket_warm_up_tokens(kGemvMaxTokens + 1, layout_.max_batch)) warm_up_matmuls_at(n);
  stream_.synchronize();
  gemms_warm_ = true;
  if (prefill_graphs_allowed_) {
    for (const int64_t bucket : prefill_graph_buckets()) capture_prefill_graph(bucket);
  }
}

void CudaEngine::warm_up_matmuls_at(int64_t n) {
  StepShape shape;
  shape.n_tokens = n;
  shape.paged = layout_.paged;
  shape.n_seqs = 1;
  shape.max_seq_tokens = n;
  shape.n_logits = n;  // the classifier of more than 8 rows (gathered rows have the same strides)
  shape.max_kv_positions = layout_.paged ? layout_.max_seq_positions : n_slots_;
  warm_matmuls_only_ = true;
  try {
    enqueue_step(shape);
  } catch (...) {
    warm_matmuls_only_ = false;
    throw;
  }
  warm_matmuls_only_ = false;
}

}  // namespace ga::cuda::engine

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
