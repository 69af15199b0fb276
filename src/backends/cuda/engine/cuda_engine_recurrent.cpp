// CudaEngine's recurrent side (RWKV): the state slots of the sequences (see the header) and the recurrent ops,
// one launcher each (kernels/recurrent.h for the token shift and the WKVs, kernels/elementwise.h for the rest).
// The ops read the step's runs from the metadata (run starts, first positions, slots), so a decode step of n
// sequences is one CUDA graph like any other model's.
#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/engine/cuda_engine.h"
#include "backends/cuda/engine/engine_checks.h"
#include "backends/cuda/kernels/elementwise.h"
#include "gpu_accel/error.h"

namespace ga::cuda::engine {

step::Rec CudaEngine::recurrent(int64_t slot) {
  GA_CHECK(slot >= 0 && slot < static_cast<int64_t>(rec_offsets_.size()), Internal, "recurrent slot ", slot, " of ",
           rec_offsets_.size());
  return step::Rec{static_cast<int32_t>(slot)};
}

// Before plan_sizes(): the slot layout, and how many slots (paged: 2 x max_seqs; the constructor bounds the count by
// n_blocks once the pool's size is known).
void CudaEngine::size_recurrent_state() {
  rec_floats_ = 0;
  rec_offsets_.clear();
  for (const step::RecurrentSpec& r : state_.recurrent) {
    GA_CHECK(r.floats > 0, Internal, "a recurrent slot of ", r.floats, " floats");
    rec_offsets_.push_back(rec_floats_);
    rec_floats_ += r.floats;
  }
  n_rec_slots_ = rec_floats_ == 0 ? 0 : layout_.paged ? 2 * layout_.max_seqs : 1;
}

RecurrentRuns CudaEngine::runs(step::Rec r) const {
  const StepShape& shape = *shape_;
  RecurrentRuns out;
  out.n_rows = shape.n_tokens;
  out.state = rec_.as<float>();
  out.slot_floats = rec_floats_;
  out.offset = r.id >= 0 ? rec_offsets_[static_cast<size_t>(r.id)] : 0;
  if (shape.paged) {
    out.q_start = meta(off_q_start());
    out.pos0 = meta(off_pos0());
    out.slot = meta(off_state_slots());
    out.n_seqs = shape.n_seqs;
  } else {
    out.pos0 = positions();  // the one run starts at the step's first position
  }
  return out;
}

void CudaEngine::assign_state_slots(std::span<const BatchEntry> batch,
                                    std::span<const std::span<const int32_t>> block_tables, int32_t* slots_h) {
  ++rec_step_;
  // First pass: every run's first block, and whether it may run (nothing changes before all are checked).
  std::vector<int32_t> run_blocks;
  for (size_t t = 0; t < batch.size(); ++t) {
    if (t > 0 && batch[t - 1].seq == batch[t].seq) continue;
    const BatchEntry& e = batch[t];
    const int32_t block = block_tables[static_cast<size_t>(e.seq)][0];
    GA_CHECK(std::find(run_blocks.begin(), run_blocks.end(), block) == run_blocks.end(), InvalidArgument,
             "batch entry ", t, ": two runs in one step share the recurrent state of block ", block);
    const int32_t slot = block_slot_[static_cast<size_t>(block)];
    if (e.pos != 0) {
      GA_CHECK(slot >= 0, InvalidArgument, "sequence ", e.seq, " continues at position ", e.pos,
               " but no recurrent state is kept for it (start again from 0)");
      GA_CHECK(slot_pos_[static_cast<size_t>(slot)] == e.pos, InvalidArgument, "sequence ", e.seq,
               " continues at position ", e.pos, " but its recurrent state stands at ",
               slot_pos_[static_cast<size_t>(slot)], " (a recurrent state cannot go back; start again from 0)");
    }
    run_blocks.push_back(block);
  }
  // Second pass: new sequences take a slot (their own block's, a free one, or the one used longest ago by a
  // sequence outside this step), then every run's slot is written for the kernels.
  for (size_t r = 0; r < run_blocks.size(); ++r) {
    const int32_t block = run_blocks[r];
    int32_t slot = block_slot_[static_cast<size_t>(block)];
    if (slot < 0) slot = take_state_slot(block, run_blocks.size(), rec_step_);
    slot_used_[static_cast<size_t>(slot)] = rec_step_;
    slots_h[r] = slot;
  }
}

int32_t CudaEngine::take_state_slot(int32_t block, size_t n_runs, uint64_t held_from) {
  int32_t pick = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(n_rec_slots_); ++s) {
    // a run of the step holds it (or a snapshot restored for the step: restore_recurrent_state)
    if (slot_used_[static_cast<size_t>(s)] >= held_from) continue;
    if (pick < 0 || slot_used_[static_cast<size_t>(s)] < slot_used_[static_cast<size_t>(pick)]) pick = s;
  }
  GA_CHECK(pick >= 0, InvalidArgument, "a step of ", n_runs, " recurrent sequences exceeds the ", n_rec_slots_,
           " state slots");
  if (const int32_t old = slot_block_[static_cast<size_t>(pick)]; old >= 0) block_slot_[static_cast<size_t>(old)] = -1;
  block_slot_[static_cast<size_t>(block)] = pick;
  slot_block_[static_cast<size_t>(pick)] = block;
  return pick;
}

// The prompt-state cache's copies (BatchBackend::save_recurrent_state): a slot's floats through the host, after
// every queued step (the snapshot must be the state those steps left).
step::RecurrentSnapshot CudaEngine::save_recurrent_state(int32_t first_block) {
  GA_CHECK(layout_.paged && n_rec_slots_ > 0, InvalidArgument,
           "recurrent snapshots are taken of a paged recurrent engine's sequences");
  GA_CHECK(first_block >= 0 && first_block < layout_.n_blocks, InvalidArgument, "block ", first_block,
           " outside the pool");
  const int32_t slot = block_slot_[static_cast<size_t>(first_block)];
  GA_CHECK(slot >= 0 && slot_pos_[static_cast<size_t>(slot)] > 0, InvalidArgument,
           "no recurrent state is kept for the sequence starting at block ", first_block);
  DeviceGuard guard(layout_.device);
  step::RecurrentSnapshot out;
  out.pos = slot_pos_[static_cast<size_t>(slot)];
  out.floats.resize(static_cast<size_t>(rec_floats_));
  settle_queued_step();
  GA_CUDA_CHECK(cudaMemcpyAsync(out.floats.data(), rec_.as<float>() + slot * rec_floats_,
                                out.floats.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
  return out;
}

// A new sequence's slot, taken as a run starting at 0 would take it, holding the snapshot; it then continues at
// snapshot.pos. Marked as used by the coming step, so that the step's new sequences do not take it back.
void CudaEngine::restore_recurrent_state(int32_t first_block, const step::RecurrentSnapshot& snapshot) {
  GA_CHECK(layout_.paged && n_rec_slots_ > 0, InvalidArgument,
           "recurrent snapshots are restored into a paged recurrent engine's sequences");
  GA_CHECK(first_block >= 0 && first_block < layout_.n_blocks, InvalidArgument, "block ", first_block,
           " outside the pool");
  GA_CHECK(static_cast<int64_t>(snapshot.floats.size()) == rec_floats_ && snapshot.pos > 0, InvalidArgument,
           "a recurrent snapshot of ", snapshot.floats.size(), " floats at position ", snapshot.pos,
           " for slots of ", rec_floats_, " floats");
  DeviceGuard guard(layout_.device);
  settle_queued_step();
  int32_t slot = block_slot_[static_cast<size_t>(first_block)];
  if (slot < 0) slot = take_state_slot(first_block, 1, rec_step_ + 1);
  GA_CUDA_CHECK(cudaMemcpyAsync(rec_.as<float>() + slot * rec_floats_, snapshot.floats.data(),
                                snapshot.floats.size() * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  stream_.synchronize();  // the snapshot's host memory may go once this returns
  slot_pos_[static_cast<size_t>(slot)] = snapshot.pos;
  slot_used_[static_cast<size_t>(slot)] = rec_step_ + 1;
}

void CudaEngine::advance_state_positions(std::span<const BatchEntry> batch,
                                         std::span<const std::span<const int32_t>> block_tables) {
  for (size_t t = 0; t < batch.size(); ++t) {
    if (t + 1 < batch.size() && batch[t + 1].seq == batch[t].seq) continue;  // not the run's last row
    const int32_t block = block_tables[static_cast<size_t>(batch[t].seq)][0];
    slot_pos_[static_cast<size_t>(block_slot_[static_cast<size_t>(block)])] = batch[t].pos + 1;
  }
}

// ---- the ops ----

// LayerNorm is the group norm of one group: both ops are one launcher.
void CudaEngine::layer_norm(const step::LayerNormOp& op) {
  if (warm_matmuls_only_) return;
  check_view(op.out, "layer_norm");
  GA_CHECK(op.out.cols == op.x.cols, Internal, "layer_norm: ", op.x.cols, " columns into ", op.out.cols);
  group_norm_rows_of("layer_norm", op.x, op.out, op.weight, op.bias, 1, op.eps);
}

void CudaEngine::group_norm(const step::GroupNormOp& op) {
  if (warm_matmuls_only_) return;
  group_norm_rows_of("group_norm", op.x, op.x, op.weight, op.bias, op.groups, op.eps);
}

void CudaEngine::group_norm_rows_of(const char* what, step::View x, step::View out, step::Vec weight, step::Vec bias,
                                    int64_t groups, float eps) {
  check_view(x, what);
  GA_CHECK(vec_size(weight) == x.cols && vec_size(bias) == x.cols, Internal, what, ": weight / bias of ",
           vec_size(weight), " / ", vec_size(bias), " for ", x.cols, " columns");
  GroupNormParams p;
  rows_of(x, p.x, p.ldx);
  rows_of(out, p.out, p.ld_out);
  p.weight = dvec(weight);
  p.bias = dvec(bias);
  p.n_rows = shape_->n_tokens;
  p.n = x.cols;
  p.groups = groups;
  p.eps = eps;
  check_params(what, group_norm_unsupported_reason, p);
  GA_CUDA_CHECK(group_norm_rows(p, stream_.get()));
  wrote(out);
}

void CudaEngine::token_shift(const step::TokenShiftOp& op) {
  if (warm_matmuls_only_) return;
  check_view(op.x, "token_shift");
  check_view(op.prev, "token_shift");
  GA_CHECK(op.prev.cols == op.x.cols && state_.recurrent[static_cast<size_t>(op.state.id)].floats == op.x.cols,
           Internal, "token_shift: shapes");
  const RecurrentRuns r = runs(op.state);
  const char* why = recurrent_runs_unsupported_reason(r);
  GA_CHECK(why == nullptr, Internal, "CUDA token_shift rejected its runs: ", why);
  GA_CUDA_CHECK(ga::cuda::token_shift(r, ptr(op.x), ld(op.x), ptr(op.prev), ld(op.prev), op.x.cols, stream_.get()));
  wrote(op.prev);
}

MixParams CudaEngine::mix_params(const step::MixOp& op) {
  for (const step::View v : {op.x, op.prev, op.out}) check_view(v, "mix");
  const int64_t C = op.x.cols;
  GA_CHECK(op.prev.cols == C && op.out.cols == C && vec_size(op.mix) == C && (!op.dyn || op.dyn.cols == C), Internal,
           "mix: shapes");
  MixParams p;
  rows_of(op.x, p.x, p.ldx);
  rows_of(op.prev, p.prev, p.ld_prev);
  p.mix = dvec(op.mix);
  if (op.dyn) {
    check_view(op.dyn, "mix");
    rows_of(op.dyn, p.dyn, p.ld_dyn);
  }
  rows_of(op.out, p.out, p.ld_out);
  p.n_rows = shape_->n_tokens;
  p.n = C;
  p.complement = op.form == step::MixForm::kComplement;
  return p;
}

void CudaEngine::mix(const step::MixOp& op) {
  if (warm_matmuls_only_) return;
  GA_CUDA_CHECK(mix_rows(mix_params(op), stream_.get()));
  wrote(op.out);
}

// One launch for mixes of the same token and predecessor (what the RWKV Programs pass); others one by one.
void CudaEngine::mixes(std::span<const step::MixOp> ops) {
  if (warm_matmuls_only_ || ops.empty()) return;
  MixManyParams p;
  bool shared = ops.size() <= static_cast<size_t>(kMaxMixes);
  for (size_t m = 0; shared && m < ops.size(); ++m) {
    p.mix[m] = mix_params(ops[m]);
    const MixParams& a = p.mix[0];
    const MixParams& b = p.mix[m];
    shared = b.x == a.x && b.prev == a.prev && b.ldx == a.ldx && b.ld_prev == a.ld_prev && b.n == a.n &&
             b.complement == a.complement;
  }
  if (!shared) {
    for (const step::MixOp& op : ops) mix(op);
    return;
  }
  p.count = static_cast<int>(ops.size());
  GA_CUDA_CHECK(mix_rows_many(p, stream_.get()));
  for (const step::MixOp& op : ops) wrote(op.out);
}

namespace {
RowUnary row_unary(step::Unary fn) {
  switch (fn) {
    case step::Unary::kSigmoid: return RowUnary::kSigmoid;
    case step::Unary::kTanh: return RowUnary::kTanh;
    case step::Unary::kSilu: return RowUnary::kSilu;
    case step::Unary::kReluSquare: return RowUnary::kReluSquare;
    case step::Unary::kExpNegExp: return RowUnary::kExpNegExp;
    case step::Unary::kV7Decay: return RowUnary::kV7Decay;
  }
  GA_THROW(Internal, "unary: unknown function ", static_cast<int>(fn));
}
}  // namespace

void CudaEngine::unary(step::View x, step::Unary fn) {
  if (warm_matmuls_only_) return;
  check_view(x, "unary");
  GA_CUDA_CHECK(unary_rows(ptr(x), ld(x), shape_->n_tokens, x.cols, row_unary(fn), stream_.get()));
  wrote(x);
}

void CudaEngine::bias_unary(step::View x, step::Vec b, step::Unary fn) {
  if (warm_matmuls_only_) return;
  check_view(x, "bias_unary");
  GA_CHECK(vec_size(b) == x.cols, Internal, "bias_unary: ", vec_size(b), " values for ", x.cols, " columns");
  GA_CUDA_CHECK(
      add_vector_unary_rows(ptr(x), ld(x), dvec(b), shape_->n_tokens, x.cols, row_unary(fn), stream_.get()));
  wrote(x);
}

void CudaEngine::mul(step::View x, step::View y) {
  if (warm_matmuls_only_) return;
  check_view(x, "mul");
  check_view(y, "mul");
  GA_CHECK(x.cols == y.cols, Internal, "mul: ", x.cols, " and ", y.cols, " columns");
  GA_CUDA_CHECK(mul_rows(ptr(x), ld(x), ptr(y), ld(y), shape_->n_tokens, x.cols, stream_.get()));
  wrote(x);
}

void CudaEngine::scale(step::View x, float s) {
  if (warm_matmuls_only_) return;
  check_view(x, "scale");
  GA_CUDA_CHECK(scale_rows(ptr(x), ld(x), shape_->n_tokens, x.cols, s, stream_.get()));
  wrote(x);
}

void CudaEngine::add_vec(step::View x, step::Vec b) {
  if (warm_matmuls_only_) return;
  check_view(x, "add_vec");
  GA_CHECK(vec_size(b) == x.cols, Internal, "add_vec: ", vec_size(b), " values for ", x.cols, " columns");
  GA_CUDA_CHECK(add_vector_rows(ptr(x), ld(x), dvec(b), shape_->n_tokens, x.cols, stream_.get()));
  wrote(x);
}

void CudaEngine::lerp_to(step::View x, step::View target, step::View t) {
  if (warm_matmuls_only_) return;
  for (const step::View v : {x, target, t}) check_view(v, "lerp_to");
  GA_CHECK(target.cols == x.cols && t.cols == x.cols, Internal, "lerp_to: shapes");
  GA_CUDA_CHECK(lerp_rows(ptr(x), ld(x), ptr(target), ld(target), ptr(t), ld(t), shape_->n_tokens, x.cols,
                          stream_.get()));
  wrote(x);
}

void CudaEngine::wkv4(const step::Wkv4Op& op) {
  if (warm_matmuls_only_) return;
  for (const step::View v : {op.k, op.v, op.out}) check_view(v, "wkv4");
  const int64_t C = op.k.cols;
  GA_CHECK(op.v.cols == C && op.out.cols == C && vec_size(op.time_first) == C && vec_size(op.time_decay) == C &&
               state_.recurrent[static_cast<size_t>(op.state.id)].floats == 3 * C,
           Internal, "wkv4: shapes");
  Wkv4Params p;
  p.runs = runs(op.state);
  rows_of(op.k, p.k, p.ldk);
  rows_of(op.v, p.v, p.ldv);
  rows_of(op.out, p.out, p.ld_out);
  p.time_first = dvec(op.time_first);
  p.time_decay = dvec(op.time_decay);
  p.n = C;
  check_params("wkv4", wkv4_unsupported_reason, p);
  GA_CUDA_CHECK(ga::cuda::wkv4(p, stream_.get()));
  wrote(op.out);
}

void CudaEngine::wkv5(const step::Wkv5Op& op) {
  if (warm_matmuls_only_) return;
  for (const step::View v : {op.r, op.k, op.v, op.out}) check_view(v, "wkv5");
  const int64_t H = op.n_head, S = op.head_size, C = H * S;
  GA_CHECK(op.r.cols == C && op.k.cols == C && op.v.cols == C && op.out.cols == C &&
               (vec_size(op.time_first) == C || vec_size(op.time_first) == H) &&
               (op.decay_view ? op.decay_view.cols == C : (vec_size(op.decay) == C || vec_size(op.decay) == H)) &&
               state_.recurrent[static_cast<size_t>(op.state.id)].floats == H * S * S,
           Internal, "wkv5: shapes");
  Wkv5Params p;
  p.runs = runs(op.state);
  rows_of(op.r, p.r, p.ldr);
  rows_of(op.k, p.k, p.ldk);
  rows_of(op.v, p.v, p.ldv);
  rows_of(op.out, p.out, p.ld_out);
  p.time_first = dvec(op.time_first);
  p.u_per_head = vec_size(op.time_first) != C;
  if (op.decay_view) {
    check_view(op.decay_view, "wkv5");
    rows_of(op.decay_view, p.decay_rows, p.ld_decay);
  } else {
    p.decay = dvec(op.decay);
    p.w_per_head = vec_size(op.decay) != C;
  }
  p.n_head = H;
  p.head_size = S;
  check_params("wkv5", wkv5_unsupported_reason, p);
  GA_CUDA_CHECK(ga::cuda::wkv5(p, stream_.get()));
  wrote(op.out);
}

void CudaEngine::wkv7(const step::Wkv7Op& op) {
  if (warm_matmuls_only_) return;
  for (const step::View v : {op.r, op.w, op.k, op.v, op.a, op.out, op.bonus}) check_view(v, "wkv7");
  const int64_t H = op.n_head, S = op.head_size, C = H * S;
  GA_CHECK(op.r.cols == C && op.w.cols == C && op.k.cols == C && op.v.cols == C && op.a.cols == C &&
               op.out.cols == C && op.bonus.cols == C && vec_size(op.k_k) == C && vec_size(op.k_a) == C &&
               vec_size(op.r_k) == C && state_.recurrent[static_cast<size_t>(op.state.id)].floats == H * S * S,
           Internal, "wkv7: shapes");
  Wkv7Params p;
  p.runs = runs(op.state);
  rows_of(op.r, p.r, p.ldr);
  rows_of(op.w, p.w, p.ldw);
  rows_of(op.k, p.k, p.ldk);
  rows_of(op.v, p.v, p.ldv);
  rows_of(op.a, p.a, p.lda);
  p.k_k = dvec(op.k_k);
  p.k_a = dvec(op.k_a);
  p.r_k = dvec(op.r_k);
  rows_of(op.out, p.out, p.ld_out);
  rows_of(op.bonus, p.bonus, p.ld_bonus);
  p.n_head = H;
  p.head_size = S;
  check_params("wkv7", wkv7_unsupported_reason, p);
  GA_CUDA_CHECK(ga::cuda::wkv7(p, stream_.get()));
  wrote(op.out);
  wrote(op.bonus);
}

}  // namespace ga::cuda::engine
