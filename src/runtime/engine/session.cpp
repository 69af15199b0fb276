// Session: one sequence over a loaded model, on the CPU reference backend or on a GPU.
//
// Device selection happens once, here: "cpu" builds the CPU forward, "cuda[:N]" the CUDA forward
// (backends/cuda/cuda_forward.h, a CUDA-free interface, so this file has no #ifdef; a build without
// CUDA answers Unsupported), "auto" tries CUDA when a device exists and falls back to the CPU when
// the GPU cannot run the model (Unsupported: e.g. a weight type without CUDA kernels). Errors from
// the GPU (out of memory with the byte counts, a failed kernel with its name) are ga::Errors like
// any other, so a caller can report them and go on.
//
// The Session owns the thread pool and the architecture's forward state (arch::SequenceForward: the
// batched forward pass with a one-sequence KV pool, the same code the Scheduler runs), and
// keeps only the bookkeeping the forward does not: how many positions are filled. All input checks
// happen in the forward's eval before any work, so a rejected call leaves the session as it was.
// The returned logits vector is the one allocation per call the API needs; the forward itself does
// not allocate while decoding.
//
// Sampling (eval_for_sampling + sample_next, what generate() runs): on a GPU with gpu_sampling the
// last token's logits row stays on the device and sample_rows_on_gpu (sampler_gpu.h) brings back only
// the candidates (one row of n_vocab floats when they cannot decide), so a decode step pays no
// n_vocab copy and no host pass over the vocabulary. The CUDA sampler is made on first use, on the
// forward's stream, sized for one row; everywhere else the row is kept on the host and sampled by
// Sampler::sample, exactly as before.
#include "gpu_accel/session.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"
#include "model/arch/architecture.h"
#include "model/arch/forward.h"
#include "runtime/engine/batch_backend.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/engine/sampler_gpu.h"

namespace ga {

const char* kv_type_name(KvType type) {
  switch (type) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::FP8: return "fp8";
  }
  return "?";
}

std::optional<KvType> kv_type_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const KvType t : {KvType::F32, KvType::F16, KvType::FP8}) {
    if (lower == kv_type_name(t)) return t;
  }
  return std::nullopt;
}

namespace engine {

DType cpu_kv_dtype(KvType type) {
  switch (type) {
    case KvType::F32: return DType::F32;
    case KvType::F16: return DType::F16;
    case KvType::FP8: return DType::F8_E4M3;
  }
  GA_THROW(InvalidArgument, "unknown KV cache type ", static_cast<int>(type));
}

DType cuda_kv_dtype(KvType type) { return type == KvType::FP8 ? DType::F8_E4M3 : DType::F16; }

}  // namespace engine

struct Session::Impl {
  const LoadedModel* model = nullptr;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<arch::SequenceForward> forward;  // CPU
  std::unique_ptr<cuda::CudaForward> gpu;         // or GPU
  std::string device = "cpu";
  int tensor_parallel = 1;
  int context_parallel = 1;
  KvType kv_type = KvType::F32;
  int64_t n_past = 0;
  bool gpu_sampling = true;
  // eval_for_sampling's result: the last logits on the device (gpu_logits.data) or in host_logits.
  cuda::DeviceLogits gpu_logits;
  std::vector<float> host_logits;
  bool logits_ready = false;
  std::unique_ptr<cuda::CudaSampling> gpu_sampler;  // made on first use

  int64_t n_vocab() const { return gpu ? gpu->n_vocab() : forward->n_vocab(); }
};

Session::Session(const LoadedModel& model, const SessionOptions& options) : impl_(std::make_unique<Impl>()) {
  const bool is_auto = options.device == "auto";
  const int gpu_index = is_auto ? 0 : engine::cuda_device_index(options.device);
  GA_CHECK(is_auto || options.device == "cpu" || gpu_index >= 0, InvalidArgument, "unknown device '",
           options.device, "' (cpu, cuda, cuda:N or auto)");
  GA_CHECK(options.n_threads >= 0, InvalidArgument, "n_threads must be >= 0 (0: all hardware threads), got ",
           options.n_threads);
  GA_CHECK(options.tensor_parallel >= 1, InvalidArgument, "tensor_parallel must be >= 1, got ",
           options.tensor_parallel);
  GA_CHECK(options.context_parallel >= 1, InvalidArgument, "context_parallel must be >= 1, got ",
           options.context_parallel);
  impl_->model = &model;
  impl_->gpu_sampling = options.gpu_sampling;
  const int64_t n_ctx = engine::resolve_n_ctx(model.config, options.n_ctx);

  GA_CHECK(options.tensor_parallel == 1 || gpu_index < 0 || is_auto, Unsupported,
           "tensor parallelism runs on the CPU only so far (--device cpu), not on ", options.device);
  GA_CHECK(options.context_parallel == 1 || gpu_index < 0 || is_auto, Unsupported,
           "context parallelism runs on the CPU only so far (--device cpu), not on ", options.device);
  const bool split = options.tensor_parallel > 1 || options.context_parallel > 1;
  if (gpu_index >= 0 && !split && (!is_auto || cuda_device_count() > 0)) {
    cuda::CudaForwardParams params;
    params.device = gpu_index;
    params.n_ctx = n_ctx;
    params.use_cuda_graph = options.cuda_graphs;
    params.prefill_graph_max_tokens = options.prefill_graph_max_tokens;
    params.kv_type = engine::cuda_kv_dtype(options.kv_type);
    try {
      impl_->gpu = cuda::make_cuda_forward(model, *arch::make_program_factory(model), params);
      impl_->device = "cuda:" + std::to_string(gpu_index);
      impl_->kv_type = options.kv_type == KvType::FP8 ? KvType::FP8 : KvType::F16;
      return;
    } catch (const Error& e) {
      if (!is_auto || e.kind() != ErrorKind::Unsupported) throw;
      GA_LOG(Warn, "device auto: the GPU cannot run this model (", e.what(), "); using the CPU");
    }
  }
  impl_->pool = std::make_unique<ThreadPool>(options.n_threads);
  arch::SequenceParams params;
  params.n_ctx = n_ctx;
  params.kv_type = engine::cpu_kv_dtype(options.kv_type);
  impl_->kv_type = options.kv_type;
  params.tensor_parallel = options.tensor_parallel;
  params.context_parallel = options.context_parallel;
  impl_->tensor_parallel = options.tensor_parallel;
  impl_->context_parallel = options.context_parallel;
  impl_->forward = std::make_unique<arch::SequenceForward>(model, params, impl_->pool.get());
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

std::vector<float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n_vocab = impl_->n_vocab();
  const size_t rows = all_logits ? tokens.size() : 1;
  std::vector<float> logits(rows * static_cast<size_t>(n_vocab));
  if (impl_->gpu) {  // both validate before any work
    impl_->gpu->eval(tokens, impl_->n_past, all_logits, logits.data());
  } else {
    impl_->forward->eval(tokens, impl_->n_past, all_logits, logits.data());
  }
  impl_->n_past += static_cast<int64_t>(tokens.size());
  impl_->logits_ready = false;
  return logits;
}

void Session::eval_for_sampling(std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  m.logits_ready = false;
  if (m.gpu && m.gpu_sampling) {
    m.gpu_logits = m.gpu->eval_device(tokens, m.n_past);
  } else {
    m.host_logits.resize(static_cast<size_t>(m.n_vocab()));
    if (m.gpu) {
      m.gpu->eval(tokens, m.n_past, false, m.host_logits.data());
    } else {
      m.forward->eval(tokens, m.n_past, false, m.host_logits.data());
    }
  }
  m.n_past += static_cast<int64_t>(tokens.size());
  m.logits_ready = true;
}

int32_t Session::sample_next(Sampler& sampler, std::span<const int32_t> history) {
  Impl& m = *impl_;
  GA_CHECK(m.logits_ready, InvalidArgument, "sample_next() needs logits from eval_for_sampling() first");
  m.logits_ready = false;  // sampling twice from one row would be a caller's bug (penalties, PRNG)
  if (!(m.gpu && m.gpu_sampling)) return sampler.sample(m.host_logits, history);
  if (!m.gpu_sampler) {
    const int32_t max_k = static_cast<int32_t>(std::min<int64_t>(kGpuSamplingMaxCandidates, m.gpu->n_vocab()));
    m.gpu_sampler = cuda::make_cuda_sampling(m.gpu->device(), 1, m.gpu->n_vocab(), max_k, m.gpu_logits.stream);
  }
  const GpuSampleRow row{&sampler, history, -1};
  std::vector<GpuSampleResult> result =
      sample_rows_on_gpu(*m.gpu_sampler, m.gpu_logits.data, m.gpu_logits.ld, std::span<const GpuSampleRow>(&row, 1));
  if (result[0].error) std::rethrow_exception(result[0].error);
  return result[0].token;
}

int64_t Session::n_past() const { return impl_->n_past; }
int64_t Session::n_ctx() const { return impl_->gpu ? impl_->gpu->n_ctx() : impl_->forward->n_ctx(); }

void Session::warm_up() {
  GA_CHECK(n_past() == 0, InvalidArgument, "warm_up() needs an empty session (n_past is ", n_past(), ")");
  if (n_ctx() < 2) return;
  const bool gpu = engine::cuda_device_index(device()) >= 0;
  // GPU: every GEMM algorithm bucket, then a prompt of each length that loads kernels of its own
  // (engine::warm_up_plan), so a later prompt of any length pays none of the one-time costs; then a
  // decode step and a sample.
  const engine::WarmUpPlan plan =
      engine::warm_up_plan(gpu, std::min<int64_t>(engine::kWarmUpPrefillTokens, n_ctx() - 1));
  if (plan.matmuls && impl_->gpu) impl_->gpu->warm_up_matmuls();
  const std::vector<int64_t>& lengths = plan.prefill_lengths;
  SamplerParams params;
  params.temperature = 0.0f;
  Sampler greedy(params);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::vector<int32_t> prompt(static_cast<size_t>(lengths[i]), 0);  // any id of the vocabulary will do
    eval_for_sampling(prompt);
    if (i + 1 < lengths.size()) {
      reset();
      continue;
    }
    const int32_t next = sample_next(greedy, prompt);
    eval_for_sampling(std::vector<int32_t>{next});  // the decode step (captured as a graph on a GPU)
    sample_next(greedy, prompt);
  }
  reset();
}

void Session::truncate(int64_t n) {
  GA_CHECK(n >= 0 && n <= impl_->n_past, OutOfRange, "truncate(", n, "): must be in [0, n_past = ", impl_->n_past,
           "]");
  impl_->n_past = n;  // later evals overwrite the cache from position n on
  impl_->logits_ready = false;
}

const LoadedModel& Session::model() const { return *impl_->model; }
int Session::n_threads() const { return impl_->pool ? impl_->pool->size() : 1; }
KvType Session::kv_type() const { return impl_->kv_type; }
const std::string& Session::device() const { return impl_->device; }

std::string Session::device_description() const {
  // the weights' precision when it is not the file's (apply_precision): what the figures of this run measure
  const std::string& mode = impl_->model->precision.mode;
  const std::string precision = mode == "native" ? "" : ", weights " + mode;
  if (impl_->gpu) return impl_->gpu->description() + precision;
  if (impl_->tensor_parallel > 1) {
    return str("cpu, ", impl_->pool->size(), " threads, tensor parallel over ", impl_->tensor_parallel, " ranks",
               precision);
  }
  if (impl_->context_parallel > 1) {
    return str("cpu, ", impl_->pool->size(), " threads, context parallel over ", impl_->context_parallel, " ranks",
               precision);
  }
  return str("cpu, ", impl_->pool->size(), " threads", precision);
}

}  // namespace ga
