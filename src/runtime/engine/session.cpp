// Session: one sequence over a loaded model on the CPU reference backend.
//
// The Session owns the thread pool and the architecture's forward state (LlamaForward: the batched
// forward pass with a one-sequence KV pool, the same code the Scheduler runs), and
// keeps only the bookkeeping the forward does not: how many positions are filled. All input checks
// happen in the forward's eval before any work, so a rejected call leaves the session as it was.
// The returned logits vector is the one allocation per call the API needs; the forward itself does
// not allocate while decoding.
#include "gpu_accel/session.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "model/arch/llama.h"
#include "runtime/engine/kv_cache.h"

namespace ga {

struct Session::Impl {
  const LoadedModel* model = nullptr;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<arch::LlamaForward> forward;
  int64_t n_past = 0;
};

Session::Session(const LoadedModel& model, const SessionOptions& options) : impl_(std::make_unique<Impl>()) {
  GA_CHECK(options.device == "cpu", Unsupported, "device '", options.device,
           "' is not available for sessions (supported: cpu)");
  GA_CHECK(options.n_threads >= 0, InvalidArgument, "n_threads must be >= 0 (0: all hardware threads), got ",
           options.n_threads);
  impl_->model = &model;
  impl_->pool = std::make_unique<ThreadPool>(options.n_threads);
  arch::LlamaContextParams params;
  params.n_ctx = engine::resolve_n_ctx(model.config, options.n_ctx);
  params.kv_type = options.kv_type == KvType::F16 ? DType::F16 : DType::F32;
  impl_->forward = std::make_unique<arch::LlamaForward>(model, params, impl_->pool.get());
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

std::vector<float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n_vocab = impl_->forward->n_vocab();
  const size_t rows = all_logits ? tokens.size() : 1;
  std::vector<float> logits(rows * static_cast<size_t>(n_vocab));
  impl_->forward->eval(tokens, impl_->n_past, all_logits, logits.data());  // validates before any work
  impl_->n_past += static_cast<int64_t>(tokens.size());
  return logits;
}

int64_t Session::n_past() const { return impl_->n_past; }
int64_t Session::n_ctx() const { return impl_->forward->n_ctx(); }

void Session::truncate(int64_t n) {
  GA_CHECK(n >= 0 && n <= impl_->n_past, OutOfRange, "truncate(", n, "): must be in [0, n_past = ", impl_->n_past,
           "]");
  impl_->n_past = n;  // later evals overwrite the cache from position n on
}

const LoadedModel& Session::model() const { return *impl_->model; }
int Session::n_threads() const { return impl_->pool->size(); }

}  // namespace ga
