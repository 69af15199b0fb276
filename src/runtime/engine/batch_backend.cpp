// The Scheduler's backends (see batch_backend.h): the CPU reference forward over a host KV pool, and
// the CUDA forward over a device pool, behind one interface.
//
// Pool sizes: on the CPU, kv_blocks = 0 means max_seqs full contexts (host memory is rarely the
// limit for the models the CPU runs). On the GPU it means "what free device memory holds", capped
// at twice max_seqs full contexts: more blocks than that serve only the prefix cache, and a pool of
// the whole H200 would take every other process's memory for little gain.
//
// Sampling: the CUDA backend keeps a step's logits rows on the device (forward_device_queued: the step is left
// queued, not waited for) and samples them with one sample_rows_on_gpu call per run of rows, on the forward's
// stream behind the step, so the host prepares the sampling while the GPU computes and a 64-sequence
// step moves 64 x K candidates instead of 64 x n_vocab floats (8 MB at n_vocab 32000) and the host
// makes no pass over the vocabulary. The sampler is made on first use (a Scheduler that never
// samples allocates nothing for it).
#include "runtime/engine/batch_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model/arch/architecture.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"

namespace ga::engine {
namespace {

constexpr int64_t kAutoBlocksContexts = 2;  // the CUDA pool's cap, in max_seqs full contexts

int64_t blocks_per_context(const BatchBackendOptions& o) { return (o.n_ctx + o.block_size - 1) / o.block_size; }

class CpuBatchBackend final : public BatchBackend {
 public:
  CpuBatchBackend(const LoadedModel& model, const BatchBackendOptions& o)
      : forward_(model, o.pool, o.n_ctx),
        kv_(forward_.state(), cpu::KvPoolParams{o.kv_blocks > 0 ? o.kv_blocks : o.max_seqs * blocks_per_context(o),
                                                o.block_size, cpu_kv_dtype(o.kv_type)}),
        threads_(o.pool != nullptr ? o.pool->size() : 1) {}

  std::span<const float> forward(std::span<const arch::BatchToken> batch,
                                 std::span<const std::span<const int32_t>> block_tables) override {
    size_t rows = 0;
    for (const arch::BatchToken& e : batch) rows += e.logits ? 1 : 0;
    logits_.resize(rows * static_cast<size_t>(forward_.n_vocab()));
    forward_.forward(batch, block_tables, kv_, logits_.data());
    return logits_;
  }
  int64_t n_vocab() const override { return forward_.n_vocab(); }
  int64_t n_blocks() const override { return kv_.n_blocks(); }
  bool recurrent_state() const override { return !forward_.state().recurrent.empty(); }
  step::RecurrentSnapshot save_recurrent_state(int32_t first_block) override {
    return kv_.save_recurrent(first_block);
  }
  void restore_recurrent_state(int32_t first_block, const step::RecurrentSnapshot& snapshot) override {
    kv_.restore_recurrent(first_block, snapshot);
  }
  const std::string& device() const override { return device_; }
  std::string description() const override {
    return str("cpu, ", threads_, " threads, KV pool ", kv_.n_blocks(), " x ", kv_.block_size(), " positions ",
               dtype_name(kv_.kv_type()));
  }

 private:
  arch::BatchForward forward_;
  cpu::KvPool kv_;
  int threads_;
  std::vector<float> logits_;
  std::string device_ = "cpu";
};

class CudaBatchBackend final : public BatchBackend {
 public:
  CudaBatchBackend(std::unique_ptr<cuda::CudaBatchForward> forward, int device_index, int64_t max_seqs,
                   bool gpu_sampling, bool recurrent)
      : forward_(std::move(forward)),
        device_("cuda:" + std::to_string(device_index)),
        sampler_max_rows_(gpu_sampling ? max_seqs : 0),
        recurrent_(recurrent) {}

  std::span<const float> forward(std::span<const arch::BatchToken> batch,
                                 std::span<const std::span<const int32_t>> block_tables) override {
    return forward_->forward(batch, block_tables);
  }
  bool samples_on_device() const override { return sampler_max_rows_ > 0; }
  void warm_up_matmuls() override { forward_->warm_up_matmuls(); }
  int64_t forward_for_sampling(std::span<const arch::BatchToken> batch,
                               std::span<const std::span<const int32_t>> block_tables) override {
    GA_CHECK(samples_on_device(), Unsupported, "this CUDA backend samples on the host (gpu_sampling off)");
    // Queued: the sampler's work goes on the same stream behind the step and its one synchronize waits for both.
    device_logits_ = forward_->forward_device_queued(batch, block_tables);
    return device_logits_.n_rows;
  }
  std::vector<GpuSampleResult> sample_rows(int64_t first_row, std::span<const GpuSampleRow> rows) override {
    GA_CHECK(samples_on_device(), Unsupported, "this CUDA backend samples on the host (gpu_sampling off)");
    GA_CHECK(first_row >= 0 && first_row + static_cast<int64_t>(rows.size()) <= device_logits_.n_rows, InvalidArgument,
             "sample_rows: rows [", first_row, ", ", first_row + static_cast<int64_t>(rows.size()), ") of a step with ",
             device_logits_.n_rows, " logits rows");
    if (rows.empty()) return {};
    if (!sampler_) {  // made on first use: on the forward's stream, for a step's largest row count
      const int32_t max_k = static_cast<int32_t>(std::min<int64_t>(kGpuSamplingMaxCandidates, forward_->n_vocab()));
      sampler_ = cuda::make_cuda_sampling(forward_->device(), sampler_max_rows_, forward_->n_vocab(), max_k,
                                          device_logits_.stream);
    }
    return sample_rows_on_gpu(*sampler_, device_logits_.data + first_row * device_logits_.ld, device_logits_.ld,
                              rows);
  }
  int64_t n_vocab() const override { return forward_->n_vocab(); }
  int64_t n_blocks() const override { return forward_->n_blocks(); }
  bool recurrent_state() const override { return recurrent_; }
  step::RecurrentSnapshot save_recurrent_state(int32_t first_block) override {
    return forward_->save_recurrent_state(first_block);
  }
  void restore_recurrent_state(int32_t first_block, const step::RecurrentSnapshot& snapshot) override {
    forward_->restore_recurrent_state(first_block, snapshot);
  }
  const std::string& device() const override { return device_; }
  std::string description() const override { return forward_->description(); }

 private:
  std::unique_ptr<cuda::CudaBatchForward> forward_;
  std::string device_;
  int64_t sampler_max_rows_ = 0;  // > 0: GPU sampling on
  bool recurrent_ = false;        // the model keeps recurrent state (no prefix cache: batch_backend.h)
  cuda::DeviceLogits device_logits_;  // the last forward_for_sampling()'s rows
  std::unique_ptr<cuda::CudaSampling> sampler_;
};

}  // namespace

int64_t BatchBackend::forward_for_sampling(std::span<const arch::BatchToken> /*batch*/,
                                           std::span<const std::span<const int32_t>> /*block_tables*/) {
  GA_THROW(Unsupported, "the ", device(), " backend does not sample on the device");
}

std::vector<GpuSampleResult> BatchBackend::sample_rows(int64_t /*first_row*/, std::span<const GpuSampleRow> /*rows*/) {
  GA_THROW(Unsupported, "the ", device(), " backend does not sample on the device");
}

step::RecurrentSnapshot BatchBackend::save_recurrent_state(int32_t /*first_block*/) {
  GA_THROW(Unsupported, "the ", device(), " backend keeps no recurrent state");
}

void BatchBackend::restore_recurrent_state(int32_t /*first_block*/, const step::RecurrentSnapshot& /*snapshot*/) {
  GA_THROW(Unsupported, "the ", device(), " backend keeps no recurrent state");
}

int cuda_device_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return -1;
  int index = 0;
  for (size_t i = 5; i < device.size(); ++i) {
    if (device[i] < '0' || device[i] > '9') return -1;
    index = index * 10 + (device[i] - '0');
  }
  return index;
}

std::unique_ptr<BatchBackend> make_batch_backend(const LoadedModel& model, const BatchBackendOptions& options) {
  const bool is_auto = options.device == "auto";
  const int gpu_index = is_auto ? 0 : cuda_device_index(options.device);
  GA_CHECK(is_auto || options.device == "cpu" || gpu_index >= 0, InvalidArgument, "unknown device '", options.device,
           "' (cpu, cuda, cuda:N or auto)");
  if (gpu_index >= 0 && (!is_auto || cuda_device_count() > 0)) {
    cuda::CudaBatchForwardParams params;
    params.device = gpu_index;
    params.block_size = options.block_size;
    params.kv_type = cuda_kv_dtype(options.kv_type);
    params.n_blocks = options.kv_blocks;
    params.max_auto_blocks = kAutoBlocksContexts * options.max_seqs * blocks_per_context(options);
    params.max_batch_tokens = options.max_batch_tokens;
    params.max_seqs = options.max_seqs;
    params.max_seq_positions = options.n_ctx;
    params.use_cuda_graph = options.cuda_graphs;
    params.prefill_graph_max_tokens = options.prefill_graph_max_tokens;
    try {
      const std::unique_ptr<step::ProgramFactory> factory = arch::make_program_factory(model);
      return std::make_unique<CudaBatchBackend>(cuda::make_cuda_batch_forward(model, *factory, params), gpu_index,
                                                options.max_seqs, options.gpu_sampling,
                                                !factory->state().recurrent.empty());
    } catch (const Error& e) {
      if (!is_auto || e.kind() != ErrorKind::Unsupported) throw;
      GA_LOG(Warn, "device auto: the GPU cannot run this model (", e.what(), "); using the CPU");
    }
  }
  return std::make_unique<CpuBatchBackend>(model, options);
}

WarmUpPlan warm_up_plan(bool gpu, int64_t max_tokens) {
  WarmUpPlan plan;
  if (max_tokens < 1) return plan;
  if (!gpu) {
    plan.prefill_lengths = {1};
    return plan;
  }
  const char* mode = std::getenv("GA_WARMUP");
  if (mode != nullptr && std::strcmp(mode, "prefill512") == 0) {
    plan.prefill_lengths = {std::min(kWarmUpPrefillTokens, max_tokens)};
    return plan;
  }
  plan.matmuls = true;
  plan.prefill_lengths = cuda::warm_up_step_tokens(max_tokens);
  return plan;
}

void warm_up_backend(BatchBackend& backend, int64_t n_ctx, int64_t block_size, int64_t max_batch_tokens,
                     int max_seqs) {
  const bool gpu = cuda_device_index(backend.device()) >= 0;
  const int64_t pool_positions = backend.n_blocks() * block_size;
  // Positions of sequence 0: n prompt tokens + 1 decoded; sequence 1 (device sampling) one more block.
  const int64_t max_n = std::min({kWarmUpPrefillTokens, max_batch_tokens, n_ctx - 1, pool_positions - 2 * block_size});
  const WarmUpPlan plan = warm_up_plan(gpu, max_n);
  const std::vector<int64_t>& lengths = plan.prefill_lengths;
  if (lengths.empty()) return;  // a pool or context too small to bother
  if (plan.matmuls) backend.warm_up_matmuls();
  const int64_t n = lengths.back();
  const int64_t seq0_blocks = (n + 1 + block_size - 1) / block_size;
  std::vector<int32_t> table0(static_cast<size_t>(seq0_blocks)), table1{static_cast<int32_t>(seq0_blocks)};
  for (int64_t b = 0; b < seq0_blocks; ++b) table0[static_cast<size_t>(b)] = static_cast<int32_t>(b);

  std::vector<arch::BatchToken> batch;
  std::vector<std::span<const int32_t>> tables{table0};
  for (const int64_t len : lengths) {  // each a fresh prompt at position 0 (its K/V overwrite the last one's)
    batch.clear();
    for (int64_t t = 0; t < len; ++t) batch.push_back(arch::BatchToken{0, t, 0, t == len - 1});
    backend.forward(batch, tables);
  }
  batch.assign(1, arch::BatchToken{0, n, 0, true});  // one decode step (a graph replay on a GPU)
  backend.forward(batch, tables);

  if (backend.samples_on_device() && max_seqs >= 2 && max_batch_tokens >= 2) {
    // both sequences start again at position 0: valid for a recurrent state too (it cannot step back to n)
    batch = {arch::BatchToken{0, 0, 0, true}, arch::BatchToken{0, 0, 1, true}};
    tables = {table0, table1};
    const int64_t rows = backend.forward_for_sampling(batch, tables);
    SamplerParams params;
    params.temperature = 0.0f;
    Sampler a(params), b(params);
    const std::vector<int32_t> history{0};
    const std::vector<GpuSampleRow> sample{{&a, history, -1}, {&b, history, -1}};
    if (rows == 2) backend.sample_rows(0, sample);
  }
}

}  // namespace ga::engine
