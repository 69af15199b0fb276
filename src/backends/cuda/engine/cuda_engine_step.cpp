// CudaEngine: one step of the Program on the stream, and eval() (one sequence) and forward() (a batch of
// sequence runs over the paged pool) around it; see the header for the design. Every launcher's status goes
// through GA_CUDA_CHECK; launchers that can reject their parameters are asked why first, so an error names
// the op and the reason instead of a bare cudaErrorInvalidValue. Both entry points check all of their input
// on the host before the first copy, so a rejected call leaves the cache as it was.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/engine/cuda_engine.h"
#include "backends/cuda/engine/engine_checks.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_simple.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/kernels/x_fp8.h"
#include "backends/cuda/engine/engine_kernels.h"
#include "core/env.h"
#include "gpu_accel/error.h"

namespace ga::cuda::engine {
namespace {

// The GEMV of x [n][w.cols] (ld ldx) into y [n][w.rows] (ld ldy) through w.

GemvParams gemv_params(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
                       const void* x_int8) {
  GemvParams g;
  g.type = w.type;
  g.w = w.data;
  g.rows = w.rows;
  g.cols = w.cols;
  g.row_stride = w.row_bytes;
  g.x = x;
  g.ldx = ldx;
  g.y = y;
  g.ldy = ldy;
  g.n_tokens = static_cast<int>(n);
  g.layout = w.layout;
  g.x_int8 = x_int8;
  return g;
}

}  // namespace

// Whether the GEMV of w reads a pre-rounded x (gemv_reads_x_int8: Q8_0 split rows, GGUF Q4_0 / Q4_K) under
// mode `from`; the buffer holds at most kGemvMaxTokens tokens. x / y here only satisfy the validation.
// The RMSNorms (kOnceAll) round x only for split-row GEMVs: their kernel is launched in stream order and its
// per-CTA prologue is exposed, while the GGUF int8 kernel (PDL) hides most of it behind the RMSNorm, which then
// only gets longer: 7B tg128 on an H200, same run, RMSNorm rounding for every int8 GEMV vs none: Q8_0 334.6 vs
// 328.0, Q4_0 400.0 vs 409.0, Q4_K_M 370.3 vs 372.9 tok/s.
bool CudaEngine::takes_x_int8(const DeviceMatrix& w, int64_t n, Int8Activations from) const {
  if (static_cast<int>(layout_.int8_activations) < static_cast<int>(from) || xq_.data() == nullptr || n < 1 ||
      n > kGemvMaxTokens || w.rows <= 0 || w.n_expert != 1 || gemv_x_int8_bytes(w.cols, n) > x_int8_scratch_bytes_) {
    return false;
  }
  if (from == Int8Activations::kOnceAll && w.layout != WeightLayout::kSplitRows) return false;
  float* const any = final_x_.as<float>();  // any 16-byte aligned device floats: only the validation reads them
  return gemv_reads_x_int8(gemv_params(w, any, (w.cols + 3) / 4 * 4, n, any, w.rows, xq_.data()));
}

bool CudaEngine::takes_x_e4m3x2(const DeviceMatrix& w, int64_t n) const {
  if (x8_.data() == nullptr || w.type != DType::F8_B128 || w.layout != WeightLayout::kSplitRows || n < 1 ||
      n > kGemvMaxTokens || w.n_expert != 1 || static_cast<uint64_t>(gemv_x_e4m3x2_bytes(w.cols, n)) > x8_bytes()) {
    return false;
  }
  float* const any = final_x_.as<float>();  // any 16-byte aligned device floats: only the validation reads them
  GemvParams g = gemv_params(w, any, (w.cols + 3) / 4 * 4, n, any, w.rows, nullptr);
  g.x_e4m3x2 = x8_.data();
  return gemv_rounds_x_to_e4m3x2(g);
}

void CudaEngine::matmul(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
                        const void* x_int8, bool x8_ready) {
  cudaStream_t s = stream_.get();
  if (warm_matmuls_only_) {  // warm_up_matmuls: each GEMM shape once per bucket
    if (n <= kGemvMaxTokens) return;
    const int type = is_float_type(w.type) || w.f8_scales != nullptr ? static_cast<int>(w.type) : static_cast<int>(DType::F16);
    if (!warmed_.emplace(type, w.rows, w.cols, gemm_bucket(n), ldx, ldy).second) return;
  }
  GA_CHECK(x_int8 == nullptr || n <= kGemvMaxTokens, Internal, "a pre-rounded x is for the GEMV only");
  if (n <= kGemvMaxTokens) {
    run_gemv(w, x, ldx, n, y, ldy, x_int8, x8_ready);
    return;
  }
  if (w.f8_scales != nullptr) {
    matmul_fp8(w, x, ldx, n, y, ldy);
    return;
  }
  GemmParams p;
  p.rows = w.rows;
  p.k = w.cols;
  p.n = n;
  p.y = y;
  p.ldy = ldy;
  if (w.type == DType::F16 || w.type == DType::BF16 || w.type == DType::F32) {
    p.type = w.type;
    p.w = w.data;
  } else {
    // [rows][cols] f16 staging of the quantized matrix (first version of the quantized prefill).
    GA_CUDA_CHECK(engine::dequantize_to_f16(w.type, w.data, w.rows, w.cols, w_stage_.as<__half>(), s, w.layout));
    p.type = DType::F16;
    p.w = w_stage_.data();
  }
  p.ldw = w.cols;
  if (p.type == DType::F32) {
    p.x = x;
    p.ldx = ldx;
  } else {
    GA_CUDA_CHECK(engine::convert_rows(x, ldx, x_stage_.data(), w.cols, p.type, n, w.cols, s));  // [n][cols] f16/bf16
    p.x = x_stage_.data();
    p.ldx = w.cols;
  }
  gemm_->run(p);
}

// The FP8 prefill of F8_B128 split rows (DeviceMatrix::f8_scales): x rounded to E4M3 per token and 128 columns
// into x_stage_ (codes, then the scales), then cuBLASLt's block-scaled FP8 GEMM on the codes in place. The GEMM
// takes whole groups of 4 tokens (its scale layout, gemm.h); the last n % 4 tokens go through the GEMV.
void CudaEngine::matmul_fp8(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy) {
  cudaStream_t s = stream_.get();
  const int64_t n4 = n / 4 * 4;
  if (n4 > 0) {
    QuantizeXFp8Params q;
    q.x = x;
    q.ldx = ldx;
    q.n = n4;
    q.k = w.cols;
    q.codes = x_stage_.as<uint8_t>();
    q.scales = reinterpret_cast<float*>(x_stage_.as<uint8_t>() + (n4 * w.cols + 15) / 16 * 16);
    check_params("quantize_x_fp8", quantize_x_fp8_unsupported_reason, q);
    GA_CUDA_CHECK(quantize_x_fp8(q, s));
    GemmParams p;
    p.type = DType::F8_B128;
    p.w = w.data;
    p.ldw = w.row_bytes;
    p.x = q.codes;
    p.ldx = w.cols;
    p.y = y;
    p.ldy = ldy;
    p.rows = w.rows;
    p.k = w.cols;
    p.n = n4;
    p.w_scales = w.f8_scales;
    p.x_scales = q.scales;
    gemm_->run(p);
  }
  if (n > n4) run_gemv(w, x + n4 * ldx, ldx, n - n4, y + n4 * ldy, ldy, nullptr);
}

// One GEMV; F8_B128 split rows on a GPU with FP8 mma get x rounded to two E4M3 digits first (x8_, the FP8
// tensor-core kernel's input: gemv.h, GemvParams::x_e4m3x2), unless the op that wrote x rounded it (x8_ready).
void CudaEngine::run_gemv(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy,
                          const void* x_int8, bool x8_ready) {
  cudaStream_t s = stream_.get();
  GemvParams g = gemv_params(w, x, ldx, n, y, ldy, x_int8);
  if (w.type == DType::F8_B128 && w.layout == WeightLayout::kSplitRows && x8_.data() != nullptr) {
    if (!x8_ready) {
      x8_of_ = step::View{};  // x8_ is this x's now, whatever view (if any) it is
      QuantizeXE4m3x2Params q;
      q.x = x;
      q.ldx = ldx;
      q.n = n;
      q.k = w.cols;
      q.out = x8_.data();
      check_params("quantize_x_e4m3x2", quantize_x_e4m3x2_unsupported_reason, q);
      GA_CUDA_CHECK(quantize_x_e4m3x2(q, s));
    }
    g.x_e4m3x2 = x8_.data();
  }
  check_params("gemv", gemv_unsupported_reason, g);
  GA_CUDA_CHECK(gemv(g, s));
}

AttentionParams CudaEngine::attention_params(const step::AttentionOp& op, const KvLayer& kv,
                                             const StepShape& shape) const {
  AttentionParams ap;
  // An op without views is allocate_state's sizing probe: any 16-byte aligned device floats stand in for q and
  // out (the checks want device pointers; nothing is launched). A null there would make every check refuse,
  // leave the workspace unsized and send every step to the simple attention.
  float* const stand_in = logits_.as<float>();
  ap.q = op.q ? ptr(op.q) : stand_in;
  ap.q_token_stride = op.q ? ld(op.q) : op.n_head * op.head_dim;
  ap.k = kv.k;
  ap.v = kv.v;
  if (kv.k8 != nullptr) {  // the FP8 cache (EngineLayout::kv_type)
    ap.kv_dtype = AttentionParams::KvDType::kFp8;
    ap.k_fp8 = kv.k8;
    ap.v_fp8 = kv.v8;
    ap.k_scale = kv.k_scale;
    ap.v_scale = kv.v_scale;
  }
  ap.kv_pos_stride = kv.spec.n_head_kv * kv.spec.head_dim;
  ap.out = op.out ? ptr(op.out) : stand_in;
  ap.out_token_stride = op.out ? ld(op.out) : op.n_head * op.head_dim;
  ap.n_tokens = static_cast<int>(shape.n_tokens);
  ap.n_head = static_cast<int>(op.n_head);
  ap.n_head_kv = static_cast<int>(op.n_head_kv);
  ap.head_dim = static_cast<int>(op.head_dim);
  ap.scale = op.scale;
  ap.window_left = static_cast<int>(op.window_left);
  ap.softcap = op.softcap;
  ap.workspace = attn_workspace_.data();
  ap.workspace_bytes = attn_workspace_bytes_;
  ap.prefill_staging = prefill_staging_.data();  // the Hopper flash prefill where the device runs it
  ap.prefill_staging_bytes = prefill_staging_.size();
  if (shape.paged) {  // one launch for every run of the step
    ap.n_seqs = shape.n_seqs;
    ap.seq_q_start = meta(off_q_start());
    ap.seq_pos0 = meta(off_pos0());
    ap.block_table = meta(off_tables());
    ap.block_table_stride = table_stride_;
    ap.block_size = static_cast<int>(layout_.block_size);
    ap.n_kv_blocks = layout_.n_blocks;
    ap.max_seq_tokens = static_cast<int>(shape.max_seq_tokens);
    ap.max_kv_positions = shape.max_kv_positions;
  } else {
    ap.pos0_device = positions();  // positions()[0] is the step's first position
    ap.max_kv_positions = n_slots_;
  }
  return ap;
}

void CudaEngine::enqueue_step(const StepShape& shape) {
  if (persistent_applies(shape)) {
    enqueue_persistent_step(shape);
    return;
  }
  shape_ = &shape;
  xq_of_ = step::View{};
  x8_of_ = step::View{};
  attn_out_ = step::View{};
  try {
    program_->run(*this);
  } catch (...) {
    shape_ = nullptr;
    throw;
  }
  shape_ = nullptr;
}

void CudaEngine::destroy_graphs() noexcept {
  const auto destroy = [](CapturedStep& g) {
    if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
    if (g.graph != nullptr) (void)cudaGraphDestroy(g.graph);
    g = CapturedStep{};
  };
  for (CapturedStep& g : graphs_) destroy(g);
  for (auto& [bucket, g] : prefill_graphs_) destroy(g);
  prefill_graphs_.clear();
}

// The shape every decode step of n tokens is captured with: contiguous, one token at the position in
// the metadata; paged, n one-token runs, each sampling, with the attention's position bound fixed.
StepShape CudaEngine::decode_shape(int64_t n) const {
  StepShape shape;
  shape.n_tokens = n;
  shape.paged = layout_.paged;
  shape.n_seqs = static_cast<int>(n);
  shape.max_seq_tokens = 1;
  shape.max_kv_positions = layout_.paged ? layout_.max_seq_positions : 0;
  shape.first_logit_row = 0;
  shape.n_logits = n;
  return shape;
}

void CudaEngine::capture_graph(const StepShape& shape) {
  if (graphs_.empty()) graphs_.resize(static_cast<size_t>(layout_.max_seqs + 1));
  CapturedStep& g = graphs_[static_cast<size_t>(shape.n_tokens)];
  if (g.exec == nullptr) capture_into(g, shape);
}

// The step of `shape` captured (nothing runs) and instantiated into g.
void CudaEngine::capture_into(CapturedStep& g, const StepShape& shape) {
  cudaStream_t s = stream_.get();
  GA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_step(shape);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(s, &broken);  // leave the stream usable
    if (broken != nullptr) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    throw;
  }
  GA_CUDA_CHECK(cudaStreamEndCapture(s, &g.graph));
  const cudaError_t status = cudaGraphInstantiate(&g.exec, g.graph, 0);
  if (status != cudaSuccess) {  // g stays empty: nothing leaks, a later step may try again
    (void)cudaGraphDestroy(g.graph);
    g = CapturedStep{};
    GA_CUDA_CHECK(status);
  }
}

void CudaEngine::launch_graph(const StepShape& shape) {
  capture_graph(shape);
  GA_CUDA_CHECK(cudaGraphLaunch(graphs_[static_cast<size_t>(shape.n_tokens)].exec, stream_.get()));
}

void CudaEngine::eval(std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits) {
  GA_CHECK(logits != nullptr, InvalidArgument, "eval needs a logits buffer");
  run_contiguous(tokens, pos0, all_logits, logits);
}

DeviceLogits CudaEngine::eval_device(std::span<const int32_t> tokens, int64_t pos0) {
  run_contiguous(tokens, pos0, false, nullptr);
  return DeviceLogits{logits_.as<float>(), 1, n_vocab_, stream_.get()};
}

void CudaEngine::run_contiguous(std::span<const int32_t> tokens, int64_t pos0, bool all_logits,
                                      float* logits) {
  GA_CHECK(!layout_.paged, Internal, "eval() is the single-sequence face; this forward has a paged pool");
  GA_CHECK(logits != nullptr || !all_logits, Internal, "all logits stay on the host only");
  const int64_t n = static_cast<int64_t>(tokens.size());
  GA_CHECK(n > 0, InvalidArgument, "eval needs at least one token");
  GA_CHECK(pos0 >= 0 && pos0 + n <= n_slots_, OutOfRange, "context overflow: ", pos0, " positions used + ", n,
           " new tokens > n_ctx ", n_slots_);
  for (int64_t i = 0; i < n; ++i) {  // all ids before any step, so a bad id changes nothing
    const int32_t id = tokens[static_cast<size_t>(i)];
    GA_CHECK(id >= 0 && id < n_vocab_, InvalidArgument, "token id ", id, " at index ", i,
             " is outside the vocabulary [0, ", n_vocab_, ")");
  }
  // A recurrent state holds one position (the CPU engine's rule): the eval starts the sequence again or continues it.
  GA_CHECK(n_rec_slots_ == 0 || pos0 == 0 || pos0 == slot_pos_[0], InvalidArgument, "eval at position ", pos0,
           " but the recurrent state stands at ", n_rec_slots_ > 0 ? slot_pos_[0] : 0,
           " (a recurrent state cannot go back; start again from 0)");
  DeviceGuard guard(layout_.device);
  cudaStream_t s = stream_.get();
  const int64_t B = layout_.max_batch;
  for (int64_t done = 0; done < n;) {
    const int64_t step_n = std::min(B, n - done);
    const bool last_step = done + step_n == n;
    // ids then positions, one copy for both (the previous step's copy has completed: every step
    // ends with a synchronizing logits copy or an explicit sync). The copy spans the unused tail of
    // the ids: one small copy costs less than two.
    for (int64_t t = 0; t < step_n; ++t) {
      host_staging_[t] = tokens[static_cast<size_t>(done + t)];
      host_staging_[off_positions() + t] = static_cast<int32_t>(pos0 + done + t);
    }
    // A prefill of a graph's bucket: the slots and the logits row come from the metadata too, and the rows
    // past step_n are padding (pad_prefill_metadata), so the copy spans up to the logits row.
    const int64_t bucket = all_logits ? 0 : prefill_graph_bucket(step_n, pos0 + done);
    if (bucket > 0) {
      for (int64_t t = 0; t < step_n; ++t) host_staging_[off_slots() + t] = host_staging_[off_positions() + t];
      host_staging_[off_logit_rows()] = static_cast<int32_t>(step_n - 1);
      pad_prefill_metadata(step_n, bucket);
    }
    const int64_t copy_ints = bucket > 0 ? off_logit_rows() + 1 : off_positions() + step_n;
    GA_CUDA_CHECK(cudaMemcpyAsync(step_in_.data(), host_staging_, static_cast<size_t>(copy_ints) * 4,
                                  cudaMemcpyHostToDevice, s));
    if (bucket > 0) {
      launch_prefill_graph(step_n, bucket);
    } else if (step_n == 1 && layout_.use_cuda_graph) {
      launch_graph(decode_shape(1));
    } else {
      StepShape shape;
      shape.n_tokens = step_n;
      shape.first_logit_row = all_logits ? 0 : step_n - 1;
      shape.n_logits = all_logits ? step_n : 1;
      enqueue_step(shape);
    }
    if (all_logits) {
      GA_CUDA_CHECK(cudaMemcpyAsync(logits + done * n_vocab_, logits_.data(),
                                    static_cast<size_t>(step_n * n_vocab_) * 4, cudaMemcpyDeviceToHost, s));
    } else if (last_step && logits != nullptr) {
      GA_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.data(), static_cast<size_t>(n_vocab_) * 4,
                                    cudaMemcpyDeviceToHost, s));
    }
    // The logits are the caller's now (on the host, or final in logits_ for a device reader);
    // kernel failures surface here, and host_staging_ is free for the next step.
    stream_.synchronize();
    done += step_n;
    if (n_rec_slots_ > 0) slot_pos_[0] = pos0 + done;
  }
}

// Checks the batch and writes its metadata into host_staging_ (see the header's layout); fills
// `shape`. Nothing is written to the device here, so a rejected batch changes nothing.
void CudaEngine::validate_batch(std::span<const BatchEntry> batch,
                                      std::span<const std::span<const int32_t>> block_tables, StepShape& shape) {
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t bs = layout_.block_size;
  GA_CHECK(n > 0, InvalidArgument, "a forward batch needs at least one token");
  GA_CHECK(n <= layout_.max_batch, InvalidArgument, "a batch of ", n, " entries exceeds max_batch_tokens ",
           layout_.max_batch);
  for (size_t sq = 0; sq < block_tables.size(); ++sq) {
    for (const int32_t b : block_tables[sq]) {
      GA_CHECK(b >= 0 && b < layout_.n_blocks, InvalidArgument, "block table of sequence ", sq, " names block ", b,
               " outside the pool of ", layout_.n_blocks);
    }
  }
  int32_t* const ids_h = host_staging_;
  int32_t* const pos_h = host_staging_ + off_positions();
  int32_t* const slots_h = host_staging_ + off_slots();
  int32_t* const rows_h = host_staging_ + off_logit_rows();
  int32_t* const q_start_h = host_staging_ + off_q_start();
  int32_t* const pos0_h = host_staging_ + off_pos0();
  int32_t* const tables_h = host_staging_ + off_tables();
  std::vector<bool> seen(block_tables.size(), false);
  int runs = 0;
  int64_t n_logits = 0;
  shape = StepShape{};
  shape.n_tokens = n;
  shape.paged = true;
  for (int64_t t = 0; t < n; ++t) {
    const BatchEntry& e = batch[static_cast<size_t>(t)];
    GA_CHECK(e.token >= 0 && e.token < n_vocab_, InvalidArgument, "token id ", e.token, " at index ", t,
             " is outside the vocabulary [0, ", n_vocab_, ")");
    GA_CHECK(e.seq >= 0 && static_cast<size_t>(e.seq) < block_tables.size(), InvalidArgument, "batch entry ", t,
             " names sequence ", e.seq, " of ", block_tables.size());
    const std::span<const int32_t> table = block_tables[static_cast<size_t>(e.seq)];
    const int64_t n_pos = std::min(static_cast<int64_t>(table.size()) * bs, layout_.max_seq_positions);
    GA_CHECK(e.pos >= 0 && e.pos < n_pos, OutOfRange, "batch entry ", t, " at position ", e.pos,
             " is outside its sequence's ", n_pos, " cached positions");
    const bool continues = t > 0 && batch[static_cast<size_t>(t - 1)].seq == e.seq;
    if (continues) {
      GA_CHECK(e.pos == batch[static_cast<size_t>(t - 1)].pos + 1, InvalidArgument, "batch entry ", t,
               " of sequence ", e.seq, " is at position ", e.pos, ", not after its predecessor's");
    } else {
      GA_CHECK(!seen[static_cast<size_t>(e.seq)], InvalidArgument, "sequence ", e.seq,
               " has two runs in one batch (its entries must be consecutive)");
      GA_CHECK(runs < layout_.max_seqs, InvalidArgument, "the batch holds more than max_seqs = ", layout_.max_seqs,
               " sequences");
      GA_CHECK(static_cast<int64_t>(table.size()) <= table_stride_, InvalidArgument, "block table of sequence ",
               e.seq, " has ", table.size(), " blocks; at most ", table_stride_, " fit max_seq_positions");
      seen[static_cast<size_t>(e.seq)] = true;
      q_start_h[runs] = static_cast<int32_t>(t);
      pos0_h[runs] = static_cast<int32_t>(e.pos);
      std::copy(table.begin(), table.end(), tables_h + runs * table_stride_);
      ++runs;
    }
    ids_h[t] = e.token;
    pos_h[t] = static_cast<int32_t>(e.pos);
    slots_h[t] = static_cast<int32_t>(table[static_cast<size_t>(e.pos / bs)] * bs + e.pos % bs);
    shape.max_kv_positions = std::max(shape.max_kv_positions, e.pos + 1);
    if (e.logits) {
      GA_CHECK(n_logits < layout_.max_seqs, InvalidArgument, "more than max_seqs = ", layout_.max_seqs,
               " entries of one batch want logits");
      rows_h[n_logits++] = static_cast<int32_t>(t);
    }
  }
  q_start_h[runs] = static_cast<int32_t>(n);
  for (int r = 0; r < runs; ++r) {
    shape.max_seq_tokens = std::max<int64_t>(shape.max_seq_tokens, q_start_h[r + 1] - q_start_h[r]);
  }
  if (n_rec_slots_ > 0) assign_state_slots(batch, block_tables, host_staging_ + off_state_slots());
  shape.n_seqs = runs;
  shape.n_logits = n_logits;
  shape.first_logit_row = n_logits > 0 ? rows_h[0] : 0;
  shape.gather_logits = n_logits > 0 && rows_h[n_logits - 1] - rows_h[0] != n_logits - 1;
}

std::span<const float> CudaEngine::forward(std::span<const BatchEntry> batch,
                                                 std::span<const std::span<const int32_t>> block_tables) {
  const int64_t rows = run_paged(batch, block_tables, StepEnd::kHostRows);
  return {host_logits_, static_cast<size_t>(rows * n_vocab_)};
}

DeviceLogits CudaEngine::forward_device(std::span<const BatchEntry> batch,
                                              std::span<const std::span<const int32_t>> block_tables) {
  const int64_t rows = run_paged(batch, block_tables, StepEnd::kDeviceRows);
  return DeviceLogits{logits_.as<float>(), rows, n_vocab_, stream_.get()};
}

DeviceLogits CudaEngine::forward_device_queued(std::span<const BatchEntry> batch,
                                                     std::span<const std::span<const int32_t>> block_tables) {
  const int64_t rows = run_paged(batch, block_tables, StepEnd::kQueued);
  return DeviceLogits{logits_.as<float>(), rows, n_vocab_, stream_.get()};
}

void CudaEngine::settle_queued_step() {
  if (!step_queued_) return;
  step_queued_ = false;  // a failure below is reported once; the stream is then in an error state anyway
  DeviceGuard guard(layout_.device);
  stream_.synchronize();
}

int64_t CudaEngine::run_paged(std::span<const BatchEntry> batch,
                                    std::span<const std::span<const int32_t>> block_tables, StepEnd end) {
  GA_CHECK(layout_.paged, Internal, "forward() is the paged face; this forward has a contiguous cache");
  // GA_SCHEDULER_TRACE=1 (a diagnostic): a lone prefill's host part before the GPU starts, split (on an H200 host:
  // 9 us back to back, 20-40 us after a pause).
  static const bool trace = env_flag("GA_SCHEDULER_TRACE");
  using TraceClock = std::chrono::steady_clock;
  const TraceClock::time_point t0 = trace ? TraceClock::now() : TraceClock::time_point{};
  settle_queued_step();  // validate_batch() rewrites host_staging_, which a queued step's copy may still read
  StepShape shape;
  validate_batch(batch, block_tables, shape);
  DeviceGuard guard(layout_.device);
  const TraceClock::time_point t1 = trace ? TraceClock::now() : TraceClock::time_point{};
  cudaStream_t s = stream_.get();
  // One copy: everything up to the last run's block table (host_staging_ is free again: the
  // previous call ended with a synchronize).
  // A prompt run alone with one logits row (a lone request's prefill) replays its bucket's prefill graph.
  const int64_t bucket = shape.n_seqs == 1 && shape.n_logits == 1
                             ? prefill_graph_bucket(shape.n_tokens, host_staging_[off_pos0()])
                             : 0;
  if (bucket > 0) pad_prefill_metadata(shape.n_tokens, bucket);
  const size_t ints = static_cast<size_t>(off_tables() + shape.n_seqs * table_stride_);
  GA_CUDA_CHECK(cudaMemcpyAsync(step_in_.data(), host_staging_, ints * 4, cudaMemcpyHostToDevice, s));
  const TraceClock::time_point t2 = trace ? TraceClock::now() : TraceClock::time_point{};
  // Decode-only steps (every run one token, every token sampling) replay a captured graph.
  if (bucket > 0) {
    launch_prefill_graph(shape.n_tokens, bucket);
    if (trace) {
      const TraceClock::time_point t3 = TraceClock::now();
      const auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
      std::fprintf(stderr,
                   "run_paged %lld tokens: settle + validate %.1f us, copy call %.1f us (%zu bytes), launch %.1f us\n",
                   static_cast<long long>(shape.n_tokens), us(t1 - t0), us(t2 - t1), ints * 4, us(t3 - t2));
    }
  } else if (layout_.use_cuda_graph && shape.max_seq_tokens == 1 && shape.n_logits == shape.n_tokens) {
    launch_graph(decode_shape(shape.n_tokens));
  } else {
    enqueue_step(shape);
  }
  if (n_rec_slots_ > 0) advance_state_positions(batch, block_tables);
  const size_t logit_floats = static_cast<size_t>(shape.n_logits * n_vocab_);
  if (logit_floats > 0 && end == StepEnd::kHostRows) {
    GA_CUDA_CHECK(cudaMemcpyAsync(host_logits_, logits_.data(), logit_floats * 4, cudaMemcpyDeviceToHost, s));
  }
  if (end == StepEnd::kQueued) {  // the reader of the rows synchronizes (forward_device_queued)
    step_queued_ = true;
    return shape.n_logits;
  }
  // Kernel failures surface here, and host_staging_ is free for the next step.
  stream_.synchronize();
  return shape.n_logits;
}

}  // namespace ga::cuda::engine

namespace ga::cuda {
namespace {

// GA_CUDA_SCHEDULE=spin|yield|blocking|auto (a diagnostic for serving latency measurements): how
// a host thread waits in a synchronize (cudaSetDeviceFlags; the runtime's default, auto, spins while the process has
// fewer contexts than cores). It must come before the device's primary context exists: when it is too late the
// runtime refuses it and the default stays. One stderr line says what happened.
void apply_schedule_override(int device) {
  const char* env = std::getenv("GA_CUDA_SCHEDULE");
  if (env == nullptr || *env == '\0') return;
  const std::string mode(env);
  const unsigned flags = mode == "spin"       ? cudaDeviceScheduleSpin
                         : mode == "yield"    ? cudaDeviceScheduleYield
                         : mode == "blocking" ? cudaDeviceScheduleBlockingSync
                                              : cudaDeviceScheduleAuto;
  int previous = 0;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device);
  const cudaError_t status = cudaSetDeviceFlags(flags);
  unsigned now = 0;
  (void)cudaGetDeviceFlags(&now);
  std::fprintf(stderr, "GA_CUDA_SCHEDULE=%s: cudaSetDeviceFlags(0x%x) %s, device flags now 0x%x\n", env, flags,
               cudaGetErrorName(status), now);
  (void)cudaGetLastError();
  (void)cudaSetDevice(previous);
}

// What both factories check and fill alike: the device must exist; the device, the graph switch and the int8
// mode go into the layout as given. Each factory adds the shape of its KV pool.
template <class Params>
engine::EngineLayout layout_from_common_params(const Params& params) {
  std::string reason;
  const int count = device_count(&reason);
  GA_CHECK(count > 0, Unsupported, "no CUDA device (", reason, ")");
  GA_CHECK(params.device >= 0 && params.device < count, InvalidArgument, "CUDA device ", params.device,
           " does not exist (", count, " devices)");
  apply_schedule_override(params.device);
  GA_CHECK(params.kv_type == DType::F16 || params.kv_type == DType::F8_E4M3, InvalidArgument,
           "CUDA KV cache type ", dtype_name(params.kv_type), " (supported: F16, F8_E4M3)");
  engine::EngineLayout layout;
  layout.device = params.device;
  layout.kv_type = params.kv_type;
  layout.use_cuda_graph = params.use_cuda_graph;
  layout.int8_activations = params.int8_activations;
  layout.decode_kernel = params.decode_kernel;
  if (const char* env = std::getenv("GA_DECODE_KERNEL"); env != nullptr && *env != '\0') {
    const std::string_view v(env);
    GA_CHECK(v == "persistent" || v == "per-op", InvalidArgument, "GA_DECODE_KERNEL=", v,
             ": expected persistent or per-op");
    layout.decode_kernel = v == "persistent" ? DecodeKernel::kPersistent : DecodeKernel::kPerOp;
  }
  layout.prefill_graph_max_tokens = params.use_cuda_graph ? std::max<int64_t>(params.prefill_graph_max_tokens, 0) : 0;
  // GA_PREFILL_GRAPHS=N (0: off): a diagnostic switch for before/after measurements in one build.
  if (const char* env = std::getenv("GA_PREFILL_GRAPHS"); env != nullptr && *env != '\0' && params.use_cuda_graph) {
    layout.prefill_graph_max_tokens = std::max<long long>(std::atoll(env), 0);
  }
  return layout;
}

}  // namespace

std::unique_ptr<CudaForward> make_cuda_forward(const LoadedModel& model, const step::ProgramFactory& factory,
                                               const CudaForwardParams& params) {
  engine::EngineLayout layout = layout_from_common_params(params);
  layout.paged = false;
  layout.block_size = params.n_ctx;
  layout.n_blocks = 1;
  layout.max_batch = params.max_batch;
  layout.max_seqs = 1;
  layout.max_seq_positions = params.n_ctx;
  return std::make_unique<engine::CudaEngine>(model, factory, layout);
}

std::unique_ptr<CudaBatchForward> make_cuda_batch_forward(const LoadedModel& model,
                                                          const step::ProgramFactory& factory,
                                                          const CudaBatchForwardParams& params) {
  engine::EngineLayout layout = layout_from_common_params(params);
  GA_CHECK(params.kv_memory_fraction > 0.0 && params.kv_memory_fraction <= 1.0, InvalidArgument,
           "kv_memory_fraction ", params.kv_memory_fraction, " is outside (0, 1]");
  layout.paged = true;
  layout.block_size = params.block_size;
  layout.n_blocks = params.n_blocks;
  layout.kv_memory_fraction = params.kv_memory_fraction;
  layout.max_auto_blocks = params.max_auto_blocks;
  layout.max_batch = params.max_batch_tokens;
  layout.max_seqs = params.max_seqs;
  layout.max_seq_positions = params.max_seq_positions;
  return std::make_unique<engine::CudaEngine>(model, factory, layout);
}

}  // namespace ga::cuda
