// The prompt-state cache of recurrent models (runtime/engine/prompt_state_cache.h): the cache's own rules
// (longest prefix, byte bound, replacement, idle drop), the CPU backend's snapshots (a copy out and back gives the
// same next logits; bad snapshots are clear errors), and the Scheduler on rwkv.cpp's tiny v5.2 model: a repeated
// prompt, and a longer one that starts with it, reuse the kept state (cached_prompt_tokens, the stats) and still
// generate exactly what the prompt alone generates on a Session, also when a small pool preempts sequences;
// with the cache off nothing is reused; housekeeping drops idle entries.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "common/greedy_requests.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/scheduler.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/engine/batch_backend.h"
#include "runtime/engine/prompt_state_cache.h"

namespace {

using ga::engine::PromptStateCache;

ga::step::RecurrentSnapshot snapshot(size_t floats, float value) {
  return ga::step::RecurrentSnapshot{7, std::vector<float>(floats, value)};
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

TEST(PromptStateCache, FindsTheLongestCachedPrefixWithinTheLimit) {
  PromptStateCache cache(1 << 20, 16);
  const std::vector<int32_t> prompt = iota_tokens(64);
  cache.insert(std::span(prompt).first(20), snapshot(4, 1.0f));
  cache.insert(std::span(prompt).first(40), snapshot(4, 2.0f));
  cache.insert(std::span(prompt).first(8), snapshot(4, 3.0f));  // below min_tokens: never a hit
  const PromptStateCache::Entry* hit = cache.longest_prefix(prompt, 63);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->tokens.size(), 40u);
  EXPECT_EQ(hit->state.floats[0], 2.0f);
  hit = cache.longest_prefix(prompt, 39);  // the 40-token entry is past the limit
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->tokens.size(), 20u);
  EXPECT_EQ(cache.longest_prefix(prompt, 15), nullptr);
  std::vector<int32_t> other = prompt;
  other[3] = 999;  // differs inside every entry
  EXPECT_EQ(cache.longest_prefix(other, 63), nullptr);
  EXPECT_EQ(cache.hits(), 2u);
  EXPECT_TRUE(cache.contains(std::span(prompt).first(20)));
  EXPECT_FALSE(cache.contains(std::span(prompt).first(21)));
}

TEST(PromptStateCache, StaysWithinItsBytesAndReplacesTheSameTokens) {
  const size_t floats = 1000;
  const uint64_t entry = floats * 4 + 20 * 4;
  PromptStateCache cache(2 * entry + 10, 16);  // room for two entries
  const std::vector<int32_t> a = iota_tokens(20, 0), b = iota_tokens(20, 100), c = iota_tokens(20, 200);
  cache.insert(a, snapshot(floats, 1.0f));
  cache.insert(b, snapshot(floats, 2.0f));
  cache.insert(a, snapshot(floats, 3.0f));  // replaces a's entry, and makes it the newest
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.bytes(), 2 * entry);
  cache.insert(c, snapshot(floats, 4.0f));  // b is the one used longest ago
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_FALSE(cache.contains(b));
  ASSERT_NE(cache.longest_prefix(a, 20), nullptr);
  EXPECT_EQ(cache.longest_prefix(a, 20)->state.floats[0], 3.0f);
  cache.insert(iota_tokens(20, 300), snapshot(floats * 3, 5.0f));  // larger than the whole budget: not kept
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_LE(cache.bytes(), 2 * entry + 10);
  EXPECT_EQ(cache.drop_idle(std::chrono::hours(1)), 0);
  EXPECT_EQ(cache.drop_idle(std::chrono::seconds(0)), 2);
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 0u);
  PromptStateCache off(0, 16);
  EXPECT_FALSE(off.enabled());
  off.insert(a, snapshot(4, 1.0f));
  EXPECT_EQ(off.entries(), 0);
}

const ga::LoadedModel& tiny_v52() {
  static const ga::LoadedModel model =
      ga::load_model(ga::test::shared_path("models/rwkv-tiny/tiny-rwkv-5v2-730K-FP32.bin"));
  return model;
}

// A snapshot taken after some tokens and put back into another sequence continues exactly as the original.
TEST(PromptStateCache, CpuBackendSnapshotsRoundTrip) {
  ga::engine::BatchBackendOptions o;
  o.n_ctx = 64;
  o.max_seqs = 2;
  auto backend = ga::engine::make_batch_backend(tiny_v52(), o);
  ASSERT_TRUE(backend->recurrent_state());
  const std::vector<int32_t> text = {'O', 'n', 'c', 'e', ' ', 'u', 'p', 'o', 'n'};
  std::vector<ga::arch::BatchToken> batch;
  for (size_t i = 0; i < text.size(); ++i) batch.push_back({text[i], static_cast<int64_t>(i), 0, i + 1 == text.size()});
  const std::vector<int32_t> table_a = {0}, table_b = {2};
  const std::vector<std::span<const int32_t>> a = {table_a}, b = {table_b};
  (void)backend->forward(batch, a);
  const ga::step::RecurrentSnapshot saved = backend->save_recurrent_state(0);
  EXPECT_EQ(saved.pos, static_cast<int64_t>(text.size()));
  const std::vector<ga::arch::BatchToken> next = {{'!', static_cast<int64_t>(text.size()), 0, true}};
  const std::span<const float> from_a = backend->forward(next, a);
  const std::vector<float> ref(from_a.begin(), from_a.end());
  backend->restore_recurrent_state(2, saved);  // a new sequence at block 2 starts from the snapshot
  const std::span<const float> from_b = backend->forward(next, b);
  ASSERT_EQ(from_b.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(from_b[i], ref[i]) << i;
  backend->restore_recurrent_state(0, saved);  // and the first sequence is put back where it stood
  const std::span<const float> again = backend->forward(next, a);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(again[i], ref[i]) << i;

  const auto invalid = [&](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ga::Error& e) {
      EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << what << ": " << e.what();
    }
  };
  invalid([&] { (void)backend->save_recurrent_state(5); }, "a block that never held a state");
  invalid([&] { (void)backend->save_recurrent_state(-1); }, "a block outside the pool");
  ga::step::RecurrentSnapshot short_one = saved;
  short_one.floats.pop_back();
  invalid([&] { backend->restore_recurrent_state(3, short_one); }, "a snapshot of another size");
  ga::step::RecurrentSnapshot at_zero = saved;
  at_zero.pos = 0;
  invalid([&] { backend->restore_recurrent_state(3, at_zero); }, "a snapshot at position 0");
}

struct Completion {
  std::vector<int32_t> tokens;
  ga::CompletionResult result;
};

Completion complete(ga::Scheduler& sched, const ga::Tokenizer& tok, const std::string& prompt, int max_tokens) {
  ga::CompletionRequest r;
  r.prompt_tokens = tok.encode(prompt, false);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  Completion out;
  std::promise<void> done;
  sched.submit(
      std::move(r),
      [&](const ga::TokenEvent& e) {
        if (e.token >= 0) out.tokens.push_back(e.token);
        return true;
      },
      [&](const ga::CompletionResult& res, std::exception_ptr error) {
        EXPECT_FALSE(error) << "the request ended with an error";
        out.result = res;
        done.set_value();
      });
  EXPECT_EQ(done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  return out;
}

ga::SchedulerOptions scheduler_options(int64_t cache_mib) {
  ga::SchedulerOptions opt;
  opt.n_ctx = 160;
  opt.n_threads = 2;
  opt.max_running = 2;
  opt.prompt_state_cache_mib = cache_mib;
  opt.prompt_state_min_tokens = 16;  // the tiny model's byte prompts are short
  return opt;
}

TEST(PromptStateCache, SchedulerReusesAPromptsStateAndGeneratesTheSame) {
  const ga::LoadedModel& model = tiny_v52();
  const ga::Tokenizer tok(model.vocab);
  ga::Scheduler sched(model, tok, scheduler_options(64));
  const std::string first = "Once upon a time there was a little girl who liked";
  const std::string longer = first + " to play in the park with her dog";
  const int64_t n_first = static_cast<int64_t>(tok.encode(first, false).size());
  ASSERT_GT(n_first, 17);

  const Completion cold = complete(sched, tok, first, 20);
  EXPECT_EQ(cold.result.cached_prompt_tokens, 0);
  EXPECT_EQ(sched.stats().prompt_states, 1);
  const Completion again = complete(sched, tok, first, 20);
  EXPECT_EQ(again.result.cached_prompt_tokens, n_first - 1);
  const Completion extended = complete(sched, tok, longer, 20);
  EXPECT_EQ(extended.result.cached_prompt_tokens, n_first - 1);  // the first prompt's state, then the rest read

  const std::vector<int32_t> want_first = ga::test::greedy_alone(model, tok, first, 20, 160);
  EXPECT_EQ(cold.tokens, want_first);
  EXPECT_EQ(again.tokens, want_first);
  EXPECT_EQ(extended.tokens, ga::test::greedy_alone(model, tok, longer, 20, 160));
  const ga::SchedulerStats stats = sched.stats();
  EXPECT_EQ(stats.prompt_state_hits, 2u);
  EXPECT_EQ(stats.prompt_states, 2);  // the first prompt's and the longer one's
  EXPECT_GT(stats.prompt_state_bytes, 0u);

  ga::HousekeepingOptions keep;
  keep.cached_idle_seconds = 3600;
  EXPECT_EQ(sched.housekeep(keep).prompt_states_freed, 0);
  ga::HousekeepingOptions drop;
  drop.cached_idle_seconds = 0;
  const ga::HousekeepingResult r = sched.housekeep(drop);
  EXPECT_EQ(r.prompt_states_freed, 2);
  EXPECT_EQ(r.prompt_states_after, 0);
  EXPECT_EQ(complete(sched, tok, first, 20).result.cached_prompt_tokens, 0);  // dropped: read again
}

// A pool too small for every request at once: sequences wait, are preempted and start again (a restart asks the
// cache again), repeated prompts start from kept states, and every answer still equals the prompt alone.
TEST(PromptStateCache, SmallPoolPreemptionsAndHitsKeepEveryAnswer) {
  const ga::LoadedModel& model = tiny_v52();
  const ga::Tokenizer tok(model.vocab);
  ga::SchedulerOptions opt = scheduler_options(64);
  opt.n_ctx = 96;
  opt.block_size = 8;
  opt.kv_blocks = 20;  // 160 positions; each request grows to ~75
  opt.max_running = 3;
  ga::Scheduler sched(model, tok, opt);
  const std::string common = "Once upon a time there was a little girl who ";
  const std::vector<std::string> prompts = {common + "liked", common + "went", common + "liked", common + "had a",
                                            common + "went", common + "liked"};
  const std::vector<std::vector<int32_t>> got = ga::test::run_greedy_requests(sched, tok, prompts, 24, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], ga::test::greedy_alone(model, tok, prompts[i], 24, 96)) << "request " << i;
  }
  const ga::SchedulerStats st = sched.stats();
  EXPECT_GT(st.prompt_state_hits, 0u);
  EXPECT_EQ(st.kv_blocks_used, 0);
  std::printf("small pool: %llu preemptions, %llu prompt-state hits\n", static_cast<unsigned long long>(st.preemptions),
              static_cast<unsigned long long>(st.prompt_state_hits));
}

TEST(PromptStateCache, SchedulerWithTheCacheOffReusesNothing) {
  const ga::LoadedModel& model = tiny_v52();
  const ga::Tokenizer tok(model.vocab);
  ga::Scheduler sched(model, tok, scheduler_options(0));
  const std::string prompt = "Once upon a time there was a little girl who liked";
  const Completion a = complete(sched, tok, prompt, 12);
  const Completion b = complete(sched, tok, prompt, 12);
  EXPECT_EQ(b.result.cached_prompt_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(sched.stats().prompt_states, 0);
  EXPECT_EQ(sched.stats().prompt_state_hits, 0u);
  try {
    ga::SchedulerOptions bad = scheduler_options(-1);
    ga::Scheduler refused(model, tok, bad);
    ADD_FAILURE() << "a negative prompt_state_cache_mib was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.what();
  }
  try {
    ga::SchedulerOptions bad = scheduler_options(16);
    bad.prompt_state_min_tokens = 0;
    ga::Scheduler refused(model, tok, bad);
    ADD_FAILURE() << "prompt_state_min_tokens 0 was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument) << e.what();
  }
}

}  // namespace
