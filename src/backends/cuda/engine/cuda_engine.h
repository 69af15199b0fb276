// CudaEngine: the CUDA backend of the step op vocabulary (backends/step_ops.h). It runs any architecture's
// Program on one GPU, for one sequence (CudaForward, the Session's engine) or for a batch of entries from
// many sequences over a paged KV pool (CudaBatchForward, the Scheduler's engine). Internal header; the
// runtime sees it only through backends/cuda/cuda_forward.h.
//
// One class, one step: both faces enqueue the same Program (cuda_engine_step.cpp); they differ only in where
// K/V of a token go and how attention finds them (StepShape::paged):
//   * contiguous (one sequence): the KV pool is one block of n_ctx positions, a token's cache row is its
//     position, attention takes the single-sequence form (pos0 read from device memory), so the one-token
//     step is captured once as a CUDA graph and replayed for every position;
//   * paged (many sequences): the pool is n_blocks x block_size positions, a token's cache row is its slot
//     (block_table[pos / block_size] * block_size + pos % block_size), attention takes the multi-sequence
//     paged form: one launch per layer for the whole mixed batch. A decode-only step (every run one token,
//     every token sampling) of n sequences is captured once per n as a CUDA graph (with the attention's host
//     bound on positions fixed at max_seq_positions, so the graph is valid for every later step of n
//     sequences) and replayed: ~200 launches become one. All n = 1 .. max_seqs are captured at construction
//     (as vLLM does at startup): a capture costs milliseconds, and a server meets every batch size as
//     sequences finish at different steps.
// A prompt step of 9..prefill_graph_max_tokens tokens alone (contiguous: any eval without all_logits; paged: one
// run, one logits row: a lone request) replays a graph captured per GEMM length bucket with the rows past the
// prompt padded (cuda_engine_prefill_graph.cpp: the short prefill is launch-bound).
// Everything a step reads from the host (ids, positions, slots, logits rows, sequence runs, block tables) is
// in one int32 device buffer filled by one host->device copy per step; the ops read it, the Program never does.
//
// What lives on the device, allocated once at construction (after checking that it fits):
//   * the weights the Program asked for, in their stored types: matrices as their GGUF bytes (quantized blocks
//     untouched, Q4_0 / Q8_0 rows repacked for the GEMV where it reads them faster), 1-D parameters as f32;
//     one buffer, every tensor 256-byte aligned, the architecture's weight groups (q/k/v, gate/up) back to
//     back so each group is ONE matrix and one GEMV launch (a decode step pays each kernel's launch gap and
//     ramp-up/drain once per matrix, and small matrices reach far less of the bandwidth alone);
//   * the KV pool, f16, per attention layer K and V of [n_slots][n_head_kv][head_dim] (kernels/attention.h);
//   * the Program's activation buffers for max_batch tokens ([max_batch][cols] f32, rows 16-byte aligned),
//     the f16/bf16 staging of a GEMM's input, the f16 staging of one dequantized weight matrix (prefill of
//     quantized models), the logits, the attention workspace and the RoPE tables.
// Projections of up to 8 tokens are the quantized GEMV (weights read once for all tokens), larger ones a
// cuBLAS GEMM.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/recurrent.h"
#include "backends/cuda/kernels/weight_layout.h"
#include "backends/cuda/persistent/persistent_decode.h"
#include "backends/cuda/persistent/plan_builder.h"
#include "backends/cuda/stream.h"
#include "backends/step_ops.h"

namespace ga::cuda {
struct MixParams;  // kernels/elementwise.h
}  // namespace ga::cuda

namespace ga::cuda::engine {

// A weight matrix on the device: rows of `cols` weights of `type`, packed. A 3-D expert stack is n_expert
// blocks of `rows` rows, expert_stride bytes apart.
struct DeviceMatrix {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;
  WeightLayout layout = WeightLayout::kGguf;  // kSplitRows: repacked at upload for the GEMV (weight_layout.h)
  int64_t n_expert = 1;
  // F8_B128 split rows on a GPU with the block-scaled FP8 GEMM (Gemm::supports_fp8): the scales as the prefill
  // GEMM reads them ([cols / 128][rows], split_rows_f8_gemm_scales), in CudaEngine::f8_gemm_scales_; else null
  const float* f8_scales = nullptr;
};

// How a CudaEngine is laid out: the KV pool, the scratch bounds and the metadata capacity.
struct EngineLayout {
  int device = 0;
  bool paged = false;               // false: one sequence, contiguous cache (block_size = n_ctx, 1 block)
  int64_t block_size = 0;           // positions per block
  int64_t n_blocks = 0;             // 0 (paged only): from free memory, see CudaBatchForwardParams
  double kv_memory_fraction = 0.9;
  int64_t max_auto_blocks = 0;
  DType kv_type = DType::F16;       // the KV cache: F16, or F8_E4M3 (codes + a float scale per position and KV head)
  int64_t max_batch = 512;          // tokens per step
  int64_t max_seqs = 1;             // sequence runs per step; logits rows forward() returns
  int64_t max_seq_positions = 0;    // positions one sequence may reach
  bool use_cuda_graph = true;       // capture decode steps (contiguous: 1 token; paged: n one-token runs)
  int64_t prefill_graph_max_tokens = 0;  // prefill graphs per bucket up to this step size; 0: none
  Int8Activations int8_activations = Int8Activations::kOnceAll;  // cuda_forward.h
  DecodeKernel decode_kernel = DecodeKernel::kPerOp;              // cuda_forward.h
};

// What one enqueued step looks like (host-known bounds; the values themselves are in step_in_).
struct StepShape {
  int64_t n_tokens = 0;
  bool paged = false;
  int n_seqs = 1;
  int64_t max_seq_tokens = 0;    // longest run
  int64_t max_kv_positions = 0;  // longest sequence end (pos0 + run length)
  // Rows of the classifier: rows [first_logit_row, first_logit_row + n_logits) of the step, or
  // (gather_logits) the n_logits rows listed in the metadata's logit_rows.
  int64_t first_logit_row = 0;
  int64_t n_logits = 0;
  bool gather_logits = false;
  // Rows past the real ones are padding (a prefill graph's bucket): every K/V store goes through the
  // metadata's slots (a pad row's is -1: no store), in the contiguous layout too.
  bool pad_rows = false;
};

class PersistentRecorder;  // cuda_engine_persistent.cpp

class CudaEngine final : public CudaForward, public CudaBatchForward, private step::Binder, private step::Ops {
  friend class PersistentRecorder;

 public:
  CudaEngine(const LoadedModel& model, const step::ProgramFactory& factory, const EngineLayout& layout);
  ~CudaEngine() override;

  // CudaForward (contiguous layout only)
  void eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) override;
  DeviceLogits eval_device(std::span<const int32_t> tokens, int64_t pos0) override;
  int64_t n_ctx() const override { return layout_.max_seq_positions; }
  // CudaBatchForward (paged layout only)
  std::span<const float> forward(std::span<const BatchEntry> batch,
                                 std::span<const std::span<const int32_t>> block_tables) override;
  DeviceLogits forward_device(std::span<const BatchEntry> batch,
                              std::span<const std::span<const int32_t>> block_tables) override;
  DeviceLogits forward_device_queued(std::span<const BatchEntry> batch,
                                     std::span<const std::span<const int32_t>> block_tables) override;
  int64_t n_blocks() const override { return layout_.n_blocks; }
  int64_t block_size() const override { return layout_.block_size; }
  uint64_t kv_bytes() const override { return kv_bytes_; }
  // both
  int device() const override { return layout_.device; }
  int64_t n_vocab() const override { return n_vocab_; }
  std::string description() const override;  // with the prefill graphs captured so far
  uint64_t device_bytes() const override { return device_bytes_; }
  void warm_up_matmuls() override;
  PrefillGraphStats prefill_graph_stats() const override { return prefill_stats_; }
  step::RecurrentSnapshot save_recurrent_state(int32_t first_block) override;  // cuda_engine_recurrent.cpp
  void restore_recurrent_state(int32_t first_block, const step::RecurrentSnapshot& snapshot) override;

 private:
  // ---- Binder (cuda_engine.cpp): the Program's handles, resolved while it is built ----
  step::Weight matrix(std::string_view name) override;
  step::Weight find_matrix(std::string_view name) override;
  step::Vec vector(std::string_view name) override;
  step::Vec find_vector(std::string_view name) override;
  step::Buf buffer(int64_t cols) override;
  step::Rope rope(const step::RopeTable& table) override;
  step::Kv kv(int64_t kv_layer) override;
  step::Rec recurrent(int64_t slot) override;
  int64_t max_step_tokens() const override { return layout_.max_batch; }
  int64_t max_positions() const override { return layout_.max_seq_positions; }

  // ---- Ops (cuda_engine_ops.cpp): what the Program enqueues, for the step in shape_ ----
  void embed(step::Weight table, step::View out, float scale) override;
  void rms_norm(const step::RmsNormOp& op) override;
  void head_rms_norm(const step::HeadNormOp& op) override;
  void linear(step::Weight w, step::View x, step::View y) override;
  void linear_concat(std::span<const step::Weight> ws, step::View x, step::View y) override;
  void rope_kv(const step::RopeKvOp& op) override;
  void attention(const step::AttentionOp& op) override;
  void glu(const step::GluOp& op) override;
  void add(step::View x, step::View y) override;
  void moe(const step::MoeOp& op) override;
  void sigmoid_gate(step::View y, step::Vec gate, step::View x) override;
  void all_reduce(step::View x) override;
  void logits(const step::LogitsOp& op) override;
  // the recurrent ops (cuda_engine_recurrent.cpp)
  void layer_norm(const step::LayerNormOp& op) override;
  void group_norm(const step::GroupNormOp& op) override;
  void token_shift(const step::TokenShiftOp& op) override;
  void mix(const step::MixOp& op) override;
  void mixes(std::span<const step::MixOp> ops) override;
  void bias_unary(step::View x, step::Vec b, step::Unary fn) override;
  MixParams mix_params(const step::MixOp& op);  // checked views, device pointers
  void unary(step::View x, step::Unary fn) override;
  void mul(step::View x, step::View y) override;
  void scale(step::View x, float s) override;
  void add_vec(step::View x, step::Vec b) override;
  void lerp_to(step::View x, step::View target, step::View t) override;
  void wkv4(const step::Wkv4Op& op) override;
  void wkv5(const step::Wkv5Op& op) override;
  void wkv7(const step::Wkv7Op& op) override;

  // ---- recurrent state (cuda_engine_recurrent.cpp) ----
  // Recurrent models (RWKV) keep each sequence's state (StateSpec::recurrent: every Rec's floats, back to back)
  // in one slot of rec_: the contiguous layout has one slot; the paged one gives the sequence whose block table
  // starts with block b the slot block_slot_[b], taken when a run of it starts at position 0 (a new sequence,
  // the CPU pool's "state beside the first block") from the free slots or, when none is free, from the slot
  // used longest ago by a sequence not in the step. A slot's state stands at slot_pos_ (the next position):
  // a run must start at 0 or there. Slots: 2 x max_seqs, at most n_blocks: the Scheduler runs at most max_seqs
  // sequences at once, so the slots taken over are those of sequences that have ended (a sequence that loses
  // its slot anyway is refused with a clear error at its next step, never run on another's state).
  int64_t rec_floats_ = 0;              // floats of one slot
  std::vector<int64_t> rec_offsets_;    // by Rec id
  int64_t n_rec_slots_ = 0;
  DeviceBuffer rec_;
  std::vector<int32_t> block_slot_;     // [n_blocks] (paged): the slot of the sequence starting there, or -1
  std::vector<int32_t> slot_block_;     // [n_rec_slots_]: the block owning it, or -1
  std::vector<int64_t> slot_pos_;       // [n_rec_slots_]
  std::vector<uint64_t> slot_used_;     // [n_rec_slots_]: the step that last ran it (reuse order)
  uint64_t rec_step_ = 0;
  void size_recurrent_state();
  // Checks the runs of a paged batch against their states and writes each run's slot into the metadata
  // (off_state_slots()); slots_h[r] for run r. Nothing on the device changes; a refused batch changes nothing.
  void assign_state_slots(std::span<const BatchEntry> batch, std::span<const std::span<const int32_t>> block_tables,
                          int32_t* slots_h);
  // A slot for a sequence starting at `block`: a free one or the one used longest ago, never one used by step
  // held_from or later (the step being assigned, or the one a restored snapshot waits for).
  int32_t take_state_slot(int32_t block, size_t n_runs, uint64_t held_from);
  void advance_state_positions(std::span<const BatchEntry> batch, std::span<const std::span<const int32_t>> block_tables);
  RecurrentRuns runs(step::Rec r) const;
  // out = the group norm of x (in groups of x.cols / groups columns) * weight + bias, for the step's rows.
  void group_norm_rows_of(const char* what, step::View x, step::View out, step::Vec weight, step::Vec bias,
                          int64_t groups, float eps);

  // ---- tables ----
  struct WeightEntry {
    std::string name;
    DeviceMatrix m;  // data set at upload
  };
  struct VectorEntry {
    std::string name;
    std::vector<float> host;       // uploaded once
    const float* data = nullptr;   // in weights_
  };
  struct BufferEntry {
    int64_t cols = 0;
    int64_t ld = 0;  // floats between rows (a multiple of 4)
    DeviceBuffer mem;
  };
  struct RopeEntry {
    step::RopeTable table;
    DeviceBuffer inv_freq;  // [n_rot / 2] double
  };
  struct KvLayer {
    step::KvLayerSpec spec;
    __half* k = nullptr;  // F16 cache: [n_slots][n_head_kv][head_dim]
    __half* v = nullptr;
    uint8_t* k8 = nullptr;  // FP8 cache: E4M3 codes [n_slots][n_head_kv][head_dim]
    uint8_t* v8 = nullptr;
    float* k_scale = nullptr;  // FP8 cache: [n_slots][n_head_kv]
    float* v_scale = nullptr;
  };
  bool fp8_kv() const { return layout_.kv_type == DType::F8_E4M3; }
  // Device bytes of one KV layer's cache for n_slots positions: F16 K and V, or FP8 codes and scales (each plane
  // aligned to kKvPlaneAlign; plan_sizes and allocate_state count through this), and of one position (unaligned:
  // the paged pool's fit, per block).
  static constexpr uint64_t kKvPlaneAlign = 256;
  uint64_t kv_layer_bytes(const step::KvLayerSpec& spec, int64_t n_slots) const;
  uint64_t kv_slot_bytes(const step::KvLayerSpec& spec) const;
  // One matrix placed over consecutive weights of a group: weights [first, first + count) of the group run as
  // one product (a group whose members differ in type fuses its leading members only: q/k of Q4_K_M).
  struct FusedRun {
    int32_t first = -1;
    int32_t count = 0;
    std::vector<int32_t> members;
    DeviceMatrix m;
  };

  const DeviceMatrix& dm(step::Weight w) const { return weights_table_[static_cast<size_t>(w.id)].m; }
  const float* dvec(step::Vec v) const { return vectors_[static_cast<size_t>(v.id)].data; }
  int64_t vec_size(step::Vec v) const { return static_cast<int64_t>(vectors_[static_cast<size_t>(v.id)].host.size()); }
  float* ptr(step::View v, int64_t row = 0) const;
  int64_t ld(step::View v) const { return buffers_[static_cast<size_t>(v.buf.id)].ld; }
  // A kernel parameter pair: the view's first row and its row stride.
  template <class T>
  void rows_of(step::View v, T*& data, int64_t& stride) const {
    data = ptr(v);
    stride = ld(v);
  }
  void check_view(step::View v, const char* op) const;
  // The matrices linear_concat(ws) runs: fused runs where the upload placed them, single matrices elsewhere.
  std::vector<const DeviceMatrix*> products(std::span<const step::Weight> ws) const;

  // ---- construction (cuda_engine.cpp) ----
  struct Sizes;
  Sizes plan_sizes() const;
  void upload_weights(const LoadedModel& model);
  void prepare_f8_gemm_scales();
  bool uses_fp8_gemm(const DeviceMatrix& m) const;
  uint64_t fp8_gemm_scale_bytes(const DeviceMatrix& m) const;
  uint64_t x8_bytes() const;
  void allocate_state();
  void check_weight_types() const;

  // ---- steps (cuda_engine_step.cpp) ----
  // eval()'s steps; host_logits == nullptr: the logits stay in logits_ (all_logits must be false).
  void run_contiguous(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* host_logits);
  // How a paged step ends: its rows copied to host_logits_ and the stream synchronized (forward()), left on the
  // device with the stream synchronized (forward_device()), or left queued (forward_device_queued()).
  enum class StepEnd { kHostRows, kDeviceRows, kQueued };
  int64_t run_paged(std::span<const BatchEntry> batch, std::span<const std::span<const int32_t>> block_tables,
                    StepEnd end);
  // Waits for a step forward_device_queued() left on the stream (host_staging_ and the scratch are free again).
  void settle_queued_step();
  bool step_queued_ = false;  // the last paged step ended without a synchronize
  void validate_batch(std::span<const BatchEntry> batch, std::span<const std::span<const int32_t>> block_tables,
                      StepShape& shape);
  // Enqueues one step whose metadata is in step_in_ (the Program, its ops reading shape); the classifier's rows
  // land in logits_.
  void enqueue_step(const StepShape& shape);
  // The attention's parameters for an op of the Program and a step of `shape`, with the workspace and the
  // prefill staging as they are allocated now: what attention() launches and what allocate_state sizes those two
  // buffers by (for the largest shapes), so the sizing cannot drift from the launches.
  AttentionParams attention_params(const step::AttentionOp& op, const KvLayer& kv, const StepShape& shape) const;
  // y[n][w.rows] (ld ldy) = x[n][w.cols] (ld ldx) * W^T: GEMV for n <= 8, else GEMM.
  // x_int8: x already rounded for the int8 GEMV (gemv.h, GemvParams::x_int8), or null. x8_ready: x8_ already holds
  // x's two E4M3 digits (an RMSNorm / GLU op or an earlier GEMV rounded exactly this x): no pre-pass.
  void matmul(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
              const void* x_int8 = nullptr, bool x8_ready = false);
  void matmul_fp8(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy);
  void run_gemv(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
                const void* x_int8, bool x8_ready = false);
  // Whether the step's GEMV through w reads its x as two E4M3 digits from x8_ (F8_B128 split rows, FP8 mma, a
  // GEMV-sized step): then the op that produces x may round it into x8_ (x8_of_) in place of run_gemv's pre-pass.
  bool takes_x_e4m3x2(const DeviceMatrix& w, int64_t n) const;
  // Whether the step's projection through w reads its x rounded once (xq_) under mode `from`.
  bool takes_x_int8(const DeviceMatrix& w, int64_t n, Int8Activations from) const;
  // Captures (once) / replays the step for shape.n_tokens; shape must be the canonical decode shape.
  void capture_graph(const StepShape& shape);
  void launch_graph(const StepShape& shape);
  StepShape decode_shape(int64_t n) const;
  void destroy_graphs() noexcept;

  ModelConfig c_;
  EngineLayout layout_;
  int64_t n_vocab_ = 0;
  int64_t n_slots_ = 0;       // n_blocks * block_size: KV rows per layer
  int64_t table_stride_ = 0;  // block-table entries per sequence in the metadata
  std::string description_;
  uint64_t device_bytes_ = 0;
  uint64_t kv_bytes_ = 0;

  step::StateSpec state_;
  std::vector<std::vector<std::string>> weight_groups_;
  const LoadedModel* model_ = nullptr;  // during construction only (the Binder resolves names in it)

  // Declaration order is destruction order reversed: buffers return to the allocator before it dies,
  // the cuBLAS handle goes before its stream.
  CachingAllocator allocator_;
  Stream stream_;
  std::unique_ptr<Gemm> gemm_;

  DeviceBuffer weights_;
  DeviceBuffer kv_;
  std::vector<WeightEntry> weights_table_;
  std::map<std::string, int32_t, std::less<>> weight_ids_;
  std::vector<VectorEntry> vectors_;
  std::map<std::string, int32_t, std::less<>> vector_ids_;
  std::vector<BufferEntry> buffers_;
  std::vector<RopeEntry> ropes_;
  std::vector<KvLayer> kv_layers_;
  std::vector<FusedRun> fused_;  // every placed group (or group prefix)
  std::unique_ptr<step::Program> program_;

  // The step being enqueued, for the ops.
  const StepShape* shape_ = nullptr;
  // The int8 GEMV's rounded x of one projection input (gemv_x_int8_bytes(widest input, 8)), written by an
  // RMSNorm or GLU op with a `next` hint, or by the quantize pre-pass, right before the GEMVs that read it;
  // empty when the mode is kInGemv. xq_of_ is the view it holds the rounding of (invalid: none), xq_from_ the
  // mode it was produced under; attn_out_ the view the last attention op wrote (its projection may round once).
  DeviceBuffer xq_;
  step::View xq_of_;
  Int8Activations xq_from_ = Int8Activations::kInGemv;
  step::View attn_out_;
  int64_t x_int8_scratch_bytes_ = 0;
  void wrote(step::View v);  // an op wrote v: a rounding of it is stale
  // The MoE layers' scratch (allocated when the Program uses expert stacks): router logits [max_batch][n_expert],
  // the routing ids / weights [max_batch][top_k], the plan, and the grouped GEMV's and the prefill's workspaces.
  int64_t moe_max_experts_ = 0, moe_max_top_k_ = 0;
  // Prefill steps of the MoE layers: the grouped GEMM (moe_prefill_graph: no host sync, so the step is a CUDA
  // graph) for models of many small experts, cuBLAS per routed expert (moe_prefill_host_sync) for few large ones.
  bool moe_prefill_grouped_ = false;
  bool moe_stacks_all_f16_ = true;
  DeviceBuffer moe_logits_, moe_ids_, moe_weights_, moe_plan_, moe_gemv_workspace_, moe_prefill_workspace_;
  uint64_t moe_scratch_bytes() const;
  int64_t moe_prefill_bytes() const;  // the prefill path's workspace for max_batch tokens (0: no prefill steps)
  // The final norm's rows before the classifier: [max_batch][ld_embd_] and the gathered [max_seqs] rows.
  DeviceBuffer final_x_, final_rows_;
  int64_t ld_embd_ = 0;
  DeviceBuffer logits_;           // [max_batch][n_vocab]
  // The step's metadata, int32, as host_staging_ (one copy per step fills all of it):
  //   ids [B] | positions [B] | slots [B] | logit_rows [B] | seq_q_start [S + 1] | seq_pos0 [S] |
  //   state_slots [S] (recurrent models) | block_tables [S][table_stride_]        (B = max_batch, S = max_seqs)
  DeviceBuffer step_in_;
  int64_t off_positions() const { return layout_.max_batch; }
  int64_t off_slots() const { return 2 * layout_.max_batch; }
  int64_t off_logit_rows() const { return 3 * layout_.max_batch; }
  int64_t off_q_start() const { return 4 * layout_.max_batch; }
  int64_t off_pos0() const { return off_q_start() + layout_.max_seqs + 1; }
  int64_t off_state_slots() const { return off_pos0() + layout_.max_seqs; }
  int64_t off_tables() const { return off_state_slots() + layout_.max_seqs; }
  int64_t metadata_ints() const { return off_tables() + layout_.max_seqs * table_stride_; }
  const int32_t* meta(int64_t offset) const { return step_in_.as<int32_t>() + offset; }
  const int32_t* ids() const { return meta(0); }
  const int32_t* positions() const { return meta(off_positions()); }
  DeviceBuffer x_stage_;          // [max_batch][largest cols] f16/bf16: a GEMM's input
  DeviceBuffer w_stage_;          // f16 [largest quantized matrix]: dequantized weights of a GEMM
  DeviceBuffer f8_gemm_scales_;   // every DeviceMatrix::f8_scales array
  DeviceBuffer x8_;               // x of a GEMV rounded to two E4M3 digits (F8_B128 split rows, sm_89+), or empty
  step::View x8_of_;              // the view x8_ holds the rounding of (invalid: none or not a view's)
  bool fp8_mma_ = false;          // the GPU has FP8 mma (sm_89+): x8_bytes()
  DeviceBuffer attn_workspace_;
  size_t attn_workspace_bytes_ = 0;
  // Whether the sizing probe found the tuned decode attention for some step shape, and else the first refusal.
  bool decode_attention_tuned_ = false;
  std::string decode_attention_refusal_;
  // The prefill attention's staging for the Hopper flash kernel (AttentionParams::prefill_staging): f16 q and
  // the runs' lengths, for the largest step. Empty (the mma.sync prefill serves) when the device cannot run the
  // flash kernel or GA_ATTN_PREFILL=mma is set (a diagnostic switch: before/after benchmarks in one run).
  DeviceBuffer prefill_staging_;
  int32_t* host_staging_ = nullptr;  // pinned [metadata_ints()]
  float* host_logits_ = nullptr;     // pinned [max_seqs][n_vocab] (paged layout): forward()'s result

  struct CapturedStep {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  std::vector<CapturedStep> graphs_;  // [max_seqs + 1], by tokens in the step
  void capture_into(CapturedStep& g, const StepShape& shape);

  // ---- the persistent decode kernel (cuda_engine_persistent.cpp, persistent/) ----
  // With DecodeKernel::kPersistent the Program is run once at construction against a recorder instead of the
  // kernels; the plan builder turns its ops into the kernel's instructions. A one-token step with one logits row
  // (the contiguous decode, a paged step of one sequence) then runs as the embedding gather and one launch of the
  // kernel, in the decode graph as elsewhere. A model the kernel does not cover keeps the per-op step; the reason
  // is logged once and shown in description().
  struct Persistent {
    bool ready = false;
    std::string refusal;  // why not, when asked for and refused
    persistent::DeviceLimits limits;
    persistent::Plan plan;
    DeviceBuffer instrs, deps, counters, partials;
    step::Weight embed_table;
    step::View embed_out;
    float embed_scale = 1.0f;
    std::string trace_path;  // GA_PERSISTENT_TRACE: the last step's timeline is written there at the end
    DeviceBuffer trace;
    bool traced = false;     // a step ran with the trace on
    bool stream_only = false;  // GA_PERSISTENT_PROBE=stream (StepArgs::stream_only)
    bool ignore_deps = false;  // GA_PERSISTENT_PROBE=free (StepArgs::ignore_deps)
    bool weights_evict_first = true;  // GA_PERSISTENT_L2 (StepArgs::weights_evict_first)
  };
  Persistent persistent_;
  void build_persistent_plan();
  bool persistent_applies(const StepShape& shape) const;
  void enqueue_persistent_step(const StepShape& shape);
  void write_persistent_trace() noexcept;

  // ---- matmul warm-up: the Program run with every op but the products skipped ----
  bool warm_matmuls_only_ = false;
  // The products already warmed: (type, rows, cols, GEMM bucket, ldx, ldy) as the GEMM's algorithm cache keys
  // them, so each is run once per bucket however many layers share its shape.
  std::set<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t>> warmed_;
  void warm_up_matmuls_at(int64_t n);

  // ---- prefill graphs (cuda_engine_prefill_graph.cpp) ----
  // The bucket whose graph serves a prompt step of n tokens at pos0 (gemm_bucket(n)), or 0 when it runs
  // enqueued: graphs off, n <= kGemvMaxTokens, the bucket above the bound or max_batch, or the padded rows
  // would pass the cache's end.
  int64_t prefill_graph_bucket(int64_t n, int64_t pos0) const;
  std::vector<int64_t> prefill_graph_buckets() const;  // every bucket a step may use, ascending
  StepShape prefill_shape(int64_t bucket) const;        // the shape its graph is captured with
  // Pads the metadata in host_staging_ of a step of n real tokens (ids, positions, and for the
  // contiguous layout the slots and the logits row already written up to n) to `bucket` rows: pad ids 0,
  // positions continuing, slots -1; paged: the single run spans the bucket.
  void pad_prefill_metadata(int64_t n, int64_t bucket);
  // Replays the bucket's graph (capturing it first if warm_up_matmuls() has not).
  void launch_prefill_graph(int64_t n, int64_t bucket);
  void capture_prefill_graph(int64_t bucket);
  std::map<int64_t, CapturedStep> prefill_graphs_;  // by bucket
  PrefillGraphStats prefill_stats_;
  bool gemms_warm_ = false;  // warm_up_matmuls() has chosen every GEMM bucket's algorithm
  bool prefill_graphs_allowed_ = true;  // false when an op of the Program synchronizes with the host
};

}  // namespace ga::cuda::engine
