// The multi-sequence batched forward over a paged KV pool against each sequence evaluated alone.
//
// Reference: SequenceForward (one sequence, contiguous cache) on the full token list of each sequence,
// itself checked against llama.cpp and numpy in test_fixture_logits.cpp. The batched runs mix
// sequences of different lengths, partial last blocks, a block table that starts with another
// sequence's blocks (a shared prefix, as the prefix cache hands out), shuffled block ids, and a step
// where decode tokens and prompt chunks of several sequences are interleaved in one batch. Only
// float32 summation order differs (batched vs single-token matmuls), hence 1e-5.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_data.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"

namespace ga::arch {
namespace {

// A natural stories260K sequence (see tests/runtime/test_session.cpp), and variations of it.
const std::vector<int32_t> kA = {1, 274, 287, 269, 317, 263, 377, 267, 265, 282, 295, 433, 426, 342, 394};
const std::vector<int32_t> kB = {1, 403, 261, 300, 385, 298, 261, 376, 298, 267, 295};
const std::vector<int32_t> kC = {1, 300};
// Shares kA's first 8 tokens (two blocks of 4), then diverges.
const std::vector<int32_t> kD = {1, 274, 287, 269, 317, 263, 377, 267, 300, 385, 261, 376};

// Every position's logits of `tokens` evaluated alone ([n][n_vocab]).
std::vector<float> alone(const LoadedModel& model, const std::vector<int32_t>& tokens, ThreadPool* pool) {
  SequenceParams params;
  params.n_ctx = 64;
  SequenceForward f(model, params, pool);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(model.config.n_vocab));
  f.eval(tokens, 0, true, logits.data());
  return logits;
}

struct Expect {
  const std::vector<float>* ref;  // alone() of the sequence
  int64_t pos;
};

void run_case(const LoadedModel& model, DType kv_type) {
  SCOPED_TRACE(model.config.name + (kv_type == DType::F16 ? " F16 KV" : " F32 KV"));
  const size_t n_vocab = static_cast<size_t>(model.config.n_vocab);
  ThreadPool pool(2);
  const std::vector<float> ref_a = alone(model, kA, &pool), ref_b = alone(model, kB, &pool),
                           ref_c = alone(model, kC, &pool), ref_d = alone(model, kD, &pool);

  BatchForward forward(model, &pool);
  cpu::KvPool kv(forward.state(), cpu::KvPoolParams{16, 4, kv_type});
  // Block tables (shuffled ids). D starts with A's first two blocks: its prefix is A's K/V.
  std::vector<int32_t> ta = {7, 2, 11, 0}, tb = {5, 9, 3}, tc = {14}, td = {7, 2, 6};
  const std::vector<std::span<const int32_t>> tables = {ta, tb, tc, td};

  std::vector<BatchToken> batch;
  std::vector<Expect> expect;
  const auto add = [&](int32_t seq, const std::vector<int32_t>& tokens, const std::vector<float>& ref, int64_t from,
                       int64_t to) {
    for (int64_t p = from; p < to; ++p) {
      batch.push_back(BatchToken{tokens[static_cast<size_t>(p)], p, seq, true});
      expect.push_back({&ref, p});
    }
  };
  const auto run_and_check = [&](const char* what) {
    SCOPED_TRACE(what);
    std::vector<float> logits(batch.size() * n_vocab);
    forward.forward(batch, tables, kv, logits.data());
    // F16 KV: a different summation order can flip the rounding of a cached element (see test_session).
    const double limit = kv_type == DType::F32 ? 1e-5 : 1e-3;
    for (size_t i = 0; i < batch.size(); ++i) {
      const float* want = expect[i].ref->data() + static_cast<size_t>(expect[i].pos) * n_vocab;
      EXPECT_LE(test::rel_l2(logits.data() + i * n_vocab, want, n_vocab), limit)
          << "entry " << i << " seq " << batch[i].seq << " pos " << batch[i].pos;
    }
    batch.clear();
    expect.clear();
  };

  // Step 1: three prompts at once (13, 6 and 2 tokens: partial last blocks).
  add(0, kA, ref_a, 0, 13);
  add(1, kB, ref_b, 0, 6);
  add(2, kC, ref_c, 0, 2);
  run_and_check("prefill of three sequences");

  // Step 2, interleaved: A decodes, B continues its prompt, D prefills after the shared prefix.
  add(3, kD, ref_d, 8, 10);
  add(0, kA, ref_a, 13, 14);
  add(1, kB, ref_b, 6, 11);
  add(3, kD, ref_d, 10, 12);
  run_and_check("decode + chunks + shared prefix");

  // Step 3: a plain decode step; only the entries that ask for logits get a row.
  batch.push_back(BatchToken{kA[14], 14, 0, true});
  batch.push_back(BatchToken{kD[11], 11, 3, false});  // recomputed in place: same K/V, no logits
  expect.push_back({&ref_a, 14});
  std::vector<float> one(n_vocab);
  forward.forward(batch, tables, kv, one.data());
  EXPECT_LE(test::rel_l2(one.data(), ref_a.data() + 14 * n_vocab, n_vocab), kv_type == DType::F32 ? 1e-5 : 1e-3);
}

TEST(BatchForward, ManySequencesEqualEachAlone) {
  const LoadedModel stories = load_gguf_model(test::shared_path("models/tinyllamas/stories260K.gguf"));
  const LoadedModel q4k = load_gguf_model(test::shared_path("fixtures/quant/fixture-Q4_K.gguf"));
  for (DType kv : {DType::F32, DType::F16}) {
    run_case(stories, kv);
    run_case(q4k, kv);
  }
}

TEST(BatchForward, RejectsBadEntries) {
  const LoadedModel model = load_gguf_model(test::shared_path("models/tinyllamas/stories260K.gguf"));
  BatchForward forward(model, nullptr);
  cpu::KvPool kv(forward.state(), cpu::KvPoolParams{4, 4, DType::F32});
  std::vector<float> logits(static_cast<size_t>(model.config.n_vocab));
  const std::vector<int32_t> table = {1, 3};
  const std::vector<int32_t> bad_table = {1, 4};  // block 4 is outside the pool
  const std::vector<std::span<const int32_t>> tables = {table};
  const std::vector<std::span<const int32_t>> bad_tables = {bad_table};
  const auto eval = [&](BatchToken e, const std::vector<std::span<const int32_t>>& t) {
    const std::vector<BatchToken> batch = {e};
    forward.forward(batch, t, kv, logits.data());
  };
  EXPECT_NO_THROW(eval(BatchToken{1, 0, 0, true}, tables));
  EXPECT_THROW(eval(BatchToken{1, 8, 0, true}, tables), Error);    // position beyond the table's 8
  EXPECT_THROW(eval(BatchToken{1, -1, 0, true}, tables), Error);   // negative position
  EXPECT_THROW(eval(BatchToken{1, 0, 1, true}, tables), Error);    // no sequence 1
  EXPECT_THROW(eval(BatchToken{512, 0, 0, true}, tables), Error);  // outside the vocabulary
  EXPECT_THROW(eval(BatchToken{1, 0, 0, true}, bad_tables), Error);
  EXPECT_THROW(forward.forward({}, tables, kv, logits.data()), Error);
  EXPECT_THROW(cpu::KvPool(forward.state(), cpu::KvPoolParams{0, 4, DType::F32}), Error);
  EXPECT_THROW(cpu::KvPool(forward.state(), cpu::KvPoolParams{4, 4, DType::Q8_0}), Error);
}

}  // namespace
}  // namespace ga::arch
