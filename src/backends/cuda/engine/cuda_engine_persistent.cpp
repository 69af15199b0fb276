// CudaEngine and the persistent decode kernel (backends/cuda/persistent/): the Program of one decode token recorded
// as the plan builder's step records, and the step that launches the kernel (see the header's "persistent" part).
//
// The recorder is the engine's Ops with every launch replaced by a record of the device pointers it would pass: the
// same views, products (fused weight runs), RoPE tables and KV layers, so the kernel reads and writes exactly what
// the per-op step does. Ops the kernel has no instruction for throw Unsupported naming them; the engine keeps the
// per-op step then.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/engine/cuda_engine.h"
#include "backends/cuda/persistent/trace.h"
#include "core/log.h"
#include "gpu_accel/error.h"

namespace ga::cuda::engine {

class PersistentRecorder final : public step::Ops {
 public:
  explicit PersistentRecorder(CudaEngine& e) : e_(e) {}
  std::vector<persistent::StepRecord> ops;
  bool embedded = false;

  void embed(step::Weight table, step::View out, float scale) override {
    GA_CHECK(!embedded && ops.empty(), Unsupported, "an embedding that is not the step's first op");
    e_.persistent_.embed_table = table;
    e_.persistent_.embed_out = out;
    e_.persistent_.embed_scale = scale;
    embedded = true;
  }
  void rms_norm(const step::RmsNormOp& op) override {
    e_.check_view(op.x, "rms_norm");
    e_.check_view(op.out, "rms_norm");
    persistent::rec::Norm n;
    n.x = e_.ptr(op.x);
    n.residual = op.residual ? e_.ptr(op.residual) : nullptr;
    n.w = e_.dvec(op.weight);
    n.out = e_.ptr(op.out);
    n.n = op.x.cols;
    n.eps = op.eps;
    ops.emplace_back(n);
  }
  void head_rms_norm(const step::HeadNormOp& op) override {
    persistent::rec::HeadNorm h;
    h.x = e_.ptr(op.x);
    h.w = e_.dvec(op.weight);
    h.x_heads = op.x.cols / op.head_dim;
    if (op.x2) {
      h.x2 = e_.ptr(op.x2);
      h.w2 = e_.dvec(op.weight2);
      h.x2_heads = op.x2.cols / op.head_dim;
    }
    h.head_dim = op.head_dim;
    h.eps = op.eps;
    ops.emplace_back(h);
  }
  void linear(step::Weight w, step::View x, step::View y) override {
    const step::Weight one[1] = {w};
    linear_concat(one, x, y);
  }
  void linear_concat(std::span<const step::Weight> ws, step::View x, step::View y) override {
    int64_t col = 0;
    for (const DeviceMatrix* m : e_.products(ws)) {
      GA_CHECK(m->n_expert == 1, Unsupported, "an expert stack in a linear op");
      ops.emplace_back(gemv(*m, e_.ptr(x), e_.ptr(y) + col));
      col += m->rows;
    }
  }
  void rope_kv(const step::RopeKvOp& op) override {
    const CudaEngine::KvLayer& kv = e_.kv_layers_[static_cast<size_t>(op.kv.id)];
    const CudaEngine::RopeEntry& r = e_.ropes_[static_cast<size_t>(op.rope.id)];
    persistent::rec::RopeKv k;
    k.q = e_.ptr(op.q);
    k.k = e_.ptr(op.k);
    k.v = e_.ptr(op.v);
    k.bq = op.bq ? e_.dvec(op.bq) : nullptr;
    k.bk = op.bk ? e_.dvec(op.bk) : nullptr;
    k.bv = op.bv ? e_.dvec(op.bv) : nullptr;
    k.n_head = op.n_head;
    k.n_head_kv = op.n_head_kv;
    k.head_dim = op.head_dim;
    k.n_rot = r.table.n_rot;
    k.neox = r.table.neox;
    k.inv_freq = r.inv_freq.as<double>();
    k.mscale = r.table.mscale;
    k.k_cache = reinterpret_cast<uint16_t*>(kv.k);
    k.v_cache = reinterpret_cast<uint16_t*>(kv.v);
    k.cache_bytes = e_.n_slots_ * kv.spec.n_head_kv * kv.spec.head_dim * 2;
    ops.emplace_back(k);
  }
  void attention(const step::AttentionOp& op) override {
    const CudaEngine::KvLayer& kv = e_.kv_layers_[static_cast<size_t>(op.kv.id)];
    persistent::rec::Attention a;
    a.q = e_.ptr(op.q);
    a.out = e_.ptr(op.out);
    a.k_cache = reinterpret_cast<const uint16_t*>(kv.k);
    a.n_head = op.n_head;
    a.n_head_kv = op.n_head_kv;
    a.head_dim = op.head_dim;
    a.scale = op.scale;
    a.window_left = op.window_left;
    a.softcap = op.softcap;
    ops.emplace_back(a);
  }
  void glu(const step::GluOp& op) override {
    persistent::rec::Glu g;
    g.gate = e_.ptr(op.gate);
    g.up = e_.ptr(op.up);
    g.out = e_.ptr(op.out);
    g.n = op.gate.cols;
    g.act = static_cast<uint8_t>(op.act == step::Activation::kGeluTanh ? detail_act_gelu : detail_act_silu);
    ops.emplace_back(g);
  }
  void logits(const step::LogitsOp& op) override {
    GA_CHECK(!op.norm_bias, Unsupported, "a final layer norm with bias (RWKV's ln_out)");
    persistent::rec::Norm n;
    n.x = e_.ptr(op.x);
    n.residual = op.residual ? e_.ptr(op.residual) : nullptr;
    n.w = e_.dvec(op.norm);
    n.out = e_.final_x_.as<float>();
    n.n = op.x.cols;
    n.eps = op.eps;
    ops.emplace_back(n);
    const DeviceMatrix& out = e_.dm(op.output);
    ops.emplace_back(gemv(out, e_.final_x_.as<float>(), e_.logits_.as<float>()));
    if (op.softcap > 0.0f) ops.emplace_back(persistent::rec::Softcap{e_.logits_.as<float>(), out.rows, op.softcap});
  }
  void add(step::View, step::View) override { refuse("add"); }
  void moe(const step::MoeOp&) override { refuse("moe"); }
  void sigmoid_gate(step::View, step::Vec, step::View) override { refuse("sigmoid_gate"); }
  void all_reduce(step::View) override { refuse("all_reduce"); }

 private:
  // y = m x, with the matrix as uploaded
  static persistent::rec::Gemv gemv(const DeviceMatrix& m, const float* x, float* y) {
    persistent::rec::Gemv g;
    g.type = m.type;
    g.w = m.data;
    g.rows = m.rows;
    g.cols = m.cols;
    g.row_bytes = m.row_bytes;
    g.gguf_layout = m.layout == WeightLayout::kGguf;
    g.x = x;
    g.y = y;
    return g;
  }
  // step_math.cuh's GluAct values (a .cpp does not include device headers)
  static constexpr uint8_t detail_act_silu = 0, detail_act_gelu = 1;
  [[noreturn]] static void refuse(const char* op) {
    GA_THROW(Unsupported, "op ", op, " has no instruction in the persistent decode kernel");
  }
  CudaEngine& e_;
};

void CudaEngine::build_persistent_plan() {
  Persistent& p = persistent_;
  try {
    const char* why = persistent::persistent_decode_unsupported_reason(layout_.device, &p.limits);
    GA_CHECK(why == nullptr, Unsupported, why);
    GA_CHECK(!kv_layers_.empty(), Unsupported, "a model without attention layers");
    GA_CHECK(!fp8_kv(), Unsupported, "an FP8 KV cache (the persistent kernel reads an f16 cache; per-op decode reads FP8)");
    PersistentRecorder rec(*this);
    const StepShape shape = decode_shape(1);
    shape_ = &shape;
    try {
      program_->run(rec);
    } catch (...) {
      shape_ = nullptr;
      throw;
    }
    shape_ = nullptr;
    GA_CHECK(rec.embedded, Unsupported, "a step without an embedding");
    const int64_t partial_floats = persistent::attention_partial_floats(rec.ops, p.limits.grid);
    if (partial_floats > 0) p.partials = DeviceBuffer(allocator_, static_cast<size_t>(partial_floats) * 4);
    persistent::PlanTarget target;
    target.grid = p.limits.grid;
    target.smem_bytes = p.limits.smem_bytes;
    // GA_PERSISTENT_X=float: every GEMV on float activations (the int8 dot's comparison)
    const char* x_mode = std::getenv("GA_PERSISTENT_X");
    target.int8_x = x_mode == nullptr || std::strcmp(x_mode, "float") != 0;
    // GA_PERSISTENT_SLOTS=N: the ring's depth (the bytes each SM keeps in flight; tuning)
    if (const char* slots = std::getenv("GA_PERSISTENT_SLOTS"); slots != nullptr) {
      if (const int n = std::atoi(slots); n > 0) target.max_slots = n;
    }
    const char* pack = std::getenv("GA_PERSISTENT_PACK");
    target.prefer_packed = pack != nullptr && std::strcmp(pack, "prefer") == 0;
    const char* probe = std::getenv("GA_PERSISTENT_PROBE");
    // GA_PERSISTENT_PROBE=stream: the weight stream with the dependency chain; =free: without it (outputs garbage)
    p.ignore_deps = probe != nullptr && std::strcmp(probe, "free") == 0;
    p.stream_only = p.ignore_deps || (probe != nullptr && std::strcmp(probe, "stream") == 0);
    // GA_PERSISTENT_L2=normal: the weight stream without its evict-first L2 policy (the comparison)
    const char* l2 = std::getenv("GA_PERSISTENT_L2");
    p.weights_evict_first = l2 == nullptr || std::strcmp(l2, "normal") != 0;
    p.plan = persistent::build_plan(rec.ops, target, p.partials.as<float>());
    const size_t instr_bytes = p.plan.instrs.size() * sizeof(persistent::Instr);
    p.instrs = DeviceBuffer(allocator_, instr_bytes);
    p.deps = DeviceBuffer(allocator_, std::max<size_t>(p.plan.deps.size(), 1) * sizeof(int32_t));
    p.counters = DeviceBuffer(allocator_, p.plan.instrs.size() * sizeof(uint32_t));
    GA_CUDA_CHECK(cudaMemcpy(p.instrs.data(), p.plan.instrs.data(), instr_bytes, cudaMemcpyHostToDevice));
    if (!p.plan.deps.empty()) {
      GA_CUDA_CHECK(cudaMemcpy(p.deps.data(), p.plan.deps.data(), p.plan.deps.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
    }
    if (const char* path = std::getenv("GA_PERSISTENT_TRACE"); path != nullptr && *path != '\0') {
      p.trace_path = path;
      p.trace = DeviceBuffer(allocator_, static_cast<size_t>(p.plan.grid) * p.plan.instrs.size() *
                                                  persistent::kTraceStamps * sizeof(uint64_t));
    }
    p.ready = true;
    GA_LOG(Info, "decode: persistent kernel, ", p.plan.summary);
  } catch (const Error& err) {
    if (err.kind() != ErrorKind::Unsupported) throw;
    p = Persistent{};
    p.refusal = err.message();
    GA_LOG(Warn, "decode: the persistent kernel does not cover this model (", p.refusal, "); per-op steps");
  }
}

bool CudaEngine::persistent_applies(const StepShape& shape) const {
  return persistent_.ready && !warm_matmuls_only_ && shape.n_tokens == 1 && shape.n_logits == 1 &&
         shape.first_logit_row == 0 && !shape.gather_logits && !shape.pad_rows && shape.n_seqs == 1;
}

void CudaEngine::enqueue_persistent_step(const StepShape& shape) {
  Persistent& p = persistent_;
  shape_ = &shape;
  try {
    embed(p.embed_table, p.embed_out, p.embed_scale);
  } catch (...) {
    shape_ = nullptr;
    throw;
  }
  shape_ = nullptr;
  persistent::StepArgs a;
  a.instrs = p.instrs.as<persistent::Instr>();
  a.n_instrs = static_cast<int32_t>(p.plan.instrs.size());
  a.deps = p.deps.as<int32_t>();
  a.counters = p.counters.as<uint32_t>();
  a.pos = positions();
  if (shape.paged) {
    a.slot = meta(off_slots());
    a.block_table = meta(off_tables());  // the step's only sequence
    a.block_size = static_cast<int32_t>(layout_.block_size);
  }
  a.n_slots = p.plan.n_slots;
  a.x_offset = p.plan.n_slots * persistent::kSlotBytes;
  a.x_int8_offset = static_cast<int32_t>(p.plan.x_int8_offset);
  a.bulk_copies = p.limits.bulk_copies;
  a.stream_only = p.stream_only;
  a.ignore_deps = p.ignore_deps;
  a.weights_evict_first = p.weights_evict_first;
  a.trace = p.trace.as<uint64_t>();
  p.traced = p.traced || a.trace != nullptr;
  GA_CUDA_CHECK(persistent::persistent_decode(a, p.plan.grid, p.plan.smem_bytes, stream_.get()));
}

void CudaEngine::write_persistent_trace() noexcept {
  Persistent& p = persistent_;
  if (!p.traced || p.trace.data() == nullptr) return;
  try {
    std::vector<uint64_t> stamps(p.trace.size() / 8);
    if (cudaStreamSynchronize(stream_.get()) != cudaSuccess ||
        cudaMemcpy(stamps.data(), p.trace.data(), p.trace.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    std::ofstream(p.trace_path) << persistent::trace_json(p.plan, stamps);
    std::fprintf(stderr, "%s(timeline of the last step: %s)\n", persistent::trace_summary(p.plan, stamps).c_str(),
                 p.trace_path.c_str());
  } catch (...) {
  }
}

}  // namespace ga::cuda::engine
