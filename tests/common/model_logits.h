// Logits of a loaded model for the model-level tests (header-only: ga_test_common links ga_core alone):
//   all_logits         every position's logits of one prompt through the CPU sequence forward;
//   last_token_logits  the logits after a prompt fed one token at a time from a fresh Session (rwkv.cpp's test
//                      feeds its tiny models so, and a recurrent state must give the same as the whole prompt).
#pragma once

#include <cstdint>
#include <vector>

#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "model/arch/forward.h"

namespace ga::test {

inline std::vector<float> all_logits(const LoadedModel& model, const std::vector<int32_t>& tokens, int64_t n_ctx = 64) {
  arch::SequenceParams p;
  p.n_ctx = n_ctx;
  arch::SequenceForward seq(model, p, nullptr);
  std::vector<float> out(tokens.size() * static_cast<size_t>(seq.n_vocab()));
  seq.eval(tokens, 0, true, out.data());
  return out;
}

inline std::vector<float> last_token_logits(const LoadedModel& model, const std::vector<int32_t>& prompt) {
  SessionOptions opts;
  opts.n_threads = 2;
  Session s(model, opts);
  std::vector<float> out;
  for (const int32_t t : prompt) out = s.eval(std::vector<int32_t>{t});
  return out;
}

}  // namespace ga::test
