// An inference session: one sequence's KV cache over a loaded model, evaluated by a backend.
//
// eval() appends tokens at the next positions (a batched prefill when several are given) and
// returns the logits of the last one (or of every one, when asked). The model must outlive the
// session.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu_accel/model.h"

namespace ga {

enum class KvType { F32, F16 };

struct SessionOptions {
  int64_t n_ctx = 0;    // 0: the model's training context, capped at 4096
  int n_threads = 0;    // 0: all hardware threads
  KvType kv_type = KvType::F32;
  std::string device = "cpu";  // "cpu" (the reference backend)
};

class Session {
 public:
  Session(const LoadedModel& model, const SessionOptions& options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Evaluates `tokens` at positions n_past() .. n_past()+n-1. Returns the logits of the last token
  // ([n_vocab]); with all_logits, every token's logits ([n][n_vocab], row-major).
  // Throws OutOfRange if the context would overflow (nothing is evaluated then) and
  // InvalidArgument for a token id outside the vocabulary.
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);

  int64_t n_past() const;
  int64_t n_ctx() const;
  // Forgets positions >= n (n <= n_past()): for prompt re-use and rollback.
  void truncate(int64_t n);
  void reset() { truncate(0); }

  const LoadedModel& model() const;
  int n_threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga
