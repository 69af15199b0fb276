// RWKV (rwkv.cpp files) on the CPU reference: rwkv.cpp's own tiny-model test (tests/test_tiny_rwkv.c of
// RWKV/rwkv.cpp), the state across evals, and the loader's errors.
//
// rwkv.cpp's check: feed the bytes '"', 'i', 'n' one at a time from the initial state, then the SUM over the
// 256 logits of (logits - expected) must satisfy |sum| <= |tolerance| * 1.05, with per-format tolerances
// (the values below are rwkv.cpp's expected_difference_sum_full for FP32/FP16, and for the v6 Q5_0/Q5_1
// files its expected_difference_sum_quantized_FP32: rwkv.cpp's test quantizes the FP32 file to these
// formats; the FP16 -> Q5 sums differ by < 0.2). Every file also gets a relative L2 bound on the row and
// the same argmax, FP32 files a per-logit bound of 1e-3, which a sum could hide.
// The same check runs on the prompt evaluated at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/kv_pool.h"
#include "common/greedy_requests.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/scheduler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "model/arch/forward.h"

namespace {

struct Case {
  const char* version;  // expected-logits-<version>.bin
  const char* format;   // tiny-rwkv-<version>-<format>.bin
  float tolerance;
  const char* arch;
};

// rwkv.cpp tests/test_tiny_rwkv.c at commit 4358e709ab2ba64e0e94f159db5e118cbb77714e.
const Case kCases[] = {
    {"4v0-660K", "FP32", 0.001000f, "rwkv4"},   {"4v0-660K", "FP16", -0.013652f, "rwkv4"},
    {"5v1-730K", "FP32", 0.001000f, "rwkv5.1"}, {"5v1-730K", "FP16", -0.289921f, "rwkv5.1"},
    {"5v2-730K", "FP32", 0.001000f, "rwkv5.2"}, {"5v2-730K", "FP16", 0.455912f, "rwkv5.2"},
    {"6v0-3m", "Q5_0", -27.332073f, "rwkv6"},   {"6v0-3m", "Q5_1", 3.576909f, "rwkv6"},
    {"7v0-834K", "FP32", 0.001000f, "rwkv7"},   {"7v0-834K", "FP16", 0.005766f, "rwkv7"},
};

std::string model_path(const Case& c) {
  return ga::test::shared_path(std::string("models/rwkv-tiny/tiny-rwkv-") + c.version + "-" + c.format + ".bin");
}

double diff_sum(const std::vector<float>& logits, const std::vector<float>& expected) {
  float sum = 0.0f;  // float, as rwkv.cpp sums
  for (size_t i = 0; i < expected.size(); ++i) sum += logits[i] - expected[i];
  return sum;
}

class TinyRwkv : public ::testing::TestWithParam<Case> {};

TEST_P(TinyRwkv, MatchesRwkvCppExpectedLogits) {
  const Case& c = GetParam();
  const ga::LoadedModel model = ga::load_model(model_path(c));
  EXPECT_EQ(model.config.arch, c.arch);
  ASSERT_EQ(model.config.n_vocab, 256);
  const std::vector<float> expected = ga::test::read_f32_file(
      ga::test::shared_path(std::string("models/rwkv-tiny/expected-logits-") + c.version + ".bin"));
  ASSERT_EQ(expected.size(), 256u);
  const std::vector<int32_t> prompt = {'"', 'i', 'n'};
  const double limit = std::fabs(c.tolerance) * 1.05;

  ga::SessionOptions opts;
  opts.n_threads = 2;
  ga::Session s(model, opts);
  std::vector<float> serial;
  for (const int32_t t : prompt) serial = s.eval(std::vector<int32_t>{t});
  const double serial_sum = diff_sum(serial, expected);
  EXPECT_LE(std::fabs(serial_sum), limit) << "token-by-token difference sum " << serial_sum;

  s.reset();
  const std::vector<float> whole = s.eval(prompt);
  const double whole_sum = diff_sum(whole, expected);
  EXPECT_LE(std::fabs(whole_sum), limit) << "whole-prompt difference sum " << whole_sum;
  // Beyond rwkv.cpp's sum (whose terms could cancel): the whole row within 2% relative L2 (measured: FP16
  // 2e-4..4e-4, Q5_1 1.3e-3, Q5_0 9e-3) and the same most likely byte.
  EXPECT_LT(ga::test::rel_l2(serial.data(), expected.data(), expected.size()), 2e-2);
  EXPECT_EQ(std::max_element(serial.begin(), serial.end()) - serial.begin(),
            std::max_element(expected.begin(), expected.end()) - expected.begin());
  if (std::string(c.format) == "FP32") {  // and every logit
    double worst = 0.0;
    for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(serial[i] - expected[i])));
    EXPECT_LT(worst, 1e-3) << "largest logit difference";
  }
  std::printf("%s-%s: difference sum %.6f token by token, %.6f at once (limit %.6f)\n", c.version, c.format,
              serial_sum, whole_sum, limit);
  // Same math in the same order either way: the two evaluations agree to rounding.
  double max_diff = 0.0;
  for (size_t i = 0; i < whole.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(whole[i] - serial[i])));
  EXPECT_LT(max_diff, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Rwkv, TinyRwkv, ::testing::ValuesIn(kCases), [](const auto& p) {
  std::string n = std::string(p.param.version) + "_" + p.param.format;
  for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return n;
});

// A longer prompt in chunks, token by token and at once agree; a rewind is refused; reset starts over.
TEST(RwkvSession, ChunksAgreeAndStateCannotRewind) {
  const ga::LoadedModel model = ga::load_model(model_path(kCases[4]));  // v5.2
  ga::SessionOptions opts;
  opts.n_threads = 2;
  ga::Session s(model, opts);
  std::vector<int32_t> text;
  for (const char ch : std::string("The quick brown fox jumps")) text.push_back(static_cast<unsigned char>(ch));
  const std::vector<float> whole = s.eval(text);
  s.reset();
  std::vector<float> pieces = s.eval(std::vector<int32_t>(text.begin(), text.begin() + 7));
  pieces = s.eval(std::vector<int32_t>(text.begin() + 7, text.end()));
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], pieces[i], 1e-4) << i;
  s.truncate(3);
  try {
    s.eval(std::vector<int32_t>{'x'});
    FAIL() << "a rewound recurrent state was accepted";
  } catch (const ga::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot go back"), std::string::npos) << e.what();
  }
  s.reset();
  const std::vector<float> again = s.eval(text);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], again[i]) << i;
}

// Several sequences in one batch, each in its own slots, give each sequence's logits alone; a sequence
// that continues where its state stands in a later step, too.
TEST(RwkvBatch, SequencesInOneStepKeepTheirOwnState) {
  const ga::LoadedModel model = ga::load_model(model_path(kCases[8]));  // v7
  ga::arch::BatchForward forward(model, nullptr, 64);
  ga::cpu::KvPool kv(forward.state(), ga::cpu::KvPoolParams{4, 64, ga::DType::F32});
  const std::vector<std::vector<int32_t>> prompts = {{'a', 'b', 'c', 'd'}, {'x', 'y'}, {'h', 'e', 'l', 'l', 'o'}};
  const std::vector<std::vector<int32_t>> tables = {{2}, {0}, {3}};
  std::vector<ga::step::BatchToken> batch;
  for (int32_t s = 0; s < 3; ++s) {
    for (size_t i = 0; i < prompts[static_cast<size_t>(s)].size(); ++i) {
      batch.push_back({prompts[static_cast<size_t>(s)][i], static_cast<int64_t>(i), s, i + 1 == prompts[static_cast<size_t>(s)].size()});
    }
  }
  const std::vector<std::span<const int32_t>> spans(tables.begin(), tables.end());
  std::vector<float> logits(3 * 256);
  forward.forward(batch, spans, kv, logits.data());
  // the next token of sequence 1 alone, continuing its state
  std::vector<float> next(256);
  const ga::step::BatchToken one{'z', 2, 1, true};
  forward.forward(std::span<const ga::step::BatchToken>(&one, 1), spans, kv, next.data());

  ga::SessionOptions opts;
  opts.n_threads = 1;
  ga::Session alone(model, opts);
  for (size_t s = 0; s < 3; ++s) {
    alone.reset();
    const std::vector<float> ref = alone.eval(prompts[s]);
    for (size_t i = 0; i < 256; ++i) ASSERT_NEAR(logits[s * 256 + i], ref[i], 1e-5) << "sequence " << s << " logit " << i;
  }
  alone.reset();
  (void)alone.eval(prompts[1]);
  const std::vector<float> ref_next = alone.eval(std::vector<int32_t>{'z'});
  for (size_t i = 0; i < 256; ++i) ASSERT_NEAR(next[i], ref_next[i], 1e-5) << i;
}

// The Scheduler on an RWKV model: concurrent greedy requests whose prompts share more than a block (which
// a prefix cache would have shared) equal each request alone on a Session, and so does a repeated prompt.
TEST(RwkvScheduler, ConcurrentRequestsEqualEachAlone) {
  const ga::LoadedModel model = ga::load_model(model_path(kCases[4]));  // v5.2
  const ga::Tokenizer tok(model.vocab);
  ga::SchedulerOptions opt;
  opt.n_ctx = 128;
  opt.n_threads = 2;
  opt.max_running = 4;
  ga::Scheduler sched(model, tok, opt);
  const std::string common = "Once upon a time there was a little girl who ";
  const std::vector<std::string> prompts = {common + "liked", common + "went", common + "had a", "The", common + "liked"};
  // the last one after the others finished: its prompt's blocks were published before
  const std::vector<std::vector<int32_t>> got = ga::test::run_greedy_requests(sched, tok, prompts, 24, 4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> want = ga::test::greedy_alone(model, tok, prompts[i], 24, 128);
    EXPECT_EQ(got[i], want) << "request " << i;
    EXPECT_EQ(want.size(), 24u);
  }
}

std::string scratch_file(const std::string& name, const std::string& bytes) {
  const std::string path = (std::filesystem::temp_directory_path() / ("ga_rwkv_" + name)).string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

void expect_error(const std::string& path, ga::ErrorKind kind, const std::string& words) {
  try {
    (void)ga::load_model(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(RwkvLoader, CorruptFilesAreClearErrors) {
  const std::string good = ga::test::read_file(model_path(kCases[0]));
  ASSERT_GT(good.size(), 1000u);
  // truncated in the middle of a tensor's data, and inside the header
  expect_error(scratch_file("trunc.bin", good.substr(0, good.size() - 100)), ga::ErrorKind::InvalidFormat, "truncated");
  expect_error(scratch_file("trunc_header.bin", good.substr(0, 10)), ga::ErrorKind::InvalidFormat, "truncated");
  // unknown file version and data type
  std::string bad_version = good;
  bad_version[4] = 99;
  expect_error(scratch_file("version.bin", bad_version), ga::ErrorKind::Unsupported, "file version 99");
  std::string bad_type = good;
  bad_type[20] = 5;
  expect_error(scratch_file("type.bin", bad_type), ga::ErrorKind::Unsupported, "data type 5");
  // a header that disagrees with the tensors: n_embed 64 instead of 128
  std::string bad_shape = good;
  bad_shape[12] = 64;
  expect_error(scratch_file("shape.bin", bad_shape), ga::ErrorKind::InvalidFormat, "emb.weight");
  // a PyTorch checkpoint (zip)
  expect_error(scratch_file("model.pth", std::string("PK\x03\x04", 4) + std::string(64, '\0')), ga::ErrorKind::Unsupported,
               "convert_pytorch_to_ggml.py");
}

// The World vocabulary file format and its greedy longest match, on a small file in that format.
TEST(RwkvWorldTokenizer, ParsesLiteralsAndMatchesGreedily) {
  std::string file;
  for (int b = 0; b < 256; ++b) {  // ids 1..256: every byte, as the real file has them
    char lit[16];
    if (b >= 0x80) {
      std::snprintf(lit, sizeof lit, "b'\\x%02x'", b);
    } else if (b == '\\' || b == '\'') {
      std::snprintf(lit, sizeof lit, "'\\%c'", b);
    } else if (b < 0x20 || b == 0x7f) {
      std::snprintf(lit, sizeof lit, "'\\x%02x'", b);
    } else {
      std::snprintf(lit, sizeof lit, "'%c'", b);
    }
    file += std::to_string(b + 1) + " " + lit + " 1\n";
  }
  file += "257 'he' 2\n258 'hell' 4\n259 'hello' 5\n260 ' wor' 4\n261 '\\n\\t' 2\n262 '\\u00e9t\\u00e9' 5\n263 b'\\xe2\\x82' 2\n264 \"it's\" 4\n";
  const std::string path = scratch_file("world_vocab.txt", file);
  ga::Tokenizer tok(ga::Vocab::from_rwkv_world(path));
  ASSERT_EQ(tok.n_vocab(), 265);
  // "hello" whole, then " wor" over " w", "l", "d", "\n\t", "été" (5 bytes), "it's", a lone 0xE2 0x82 pair then 0xAC
  const std::string text = "hello world\n\t\xc3\xa9t\xc3\xa9it's\xe2\x82\xac hel";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  const std::vector<int32_t> want = {259, 260, 'l' + 1, 'd' + 1, 261, 262, 264, 263, 0xac + 1, ' ' + 1, 257, 'l' + 1};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tok.decode(ids, false), text);
  // a bad line names the file and line
  try {
    (void)ga::Vocab::from_rwkv_world(scratch_file("bad_vocab.txt", "1 'ab' 3\n"));
    FAIL() << "a wrong length was accepted";
  } catch (const ga::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_vocab.txt:1"), std::string::npos) << e.what();
  }
}

// Every cut of the first 4 KiB (headers, names, the first tensors) and a grid over the whole file, and bit
// flips in the header and first tensor records: a ga::Error or a model that loads, never a crash.
TEST(RwkvLoader, TruncationsAndBitFlipsNeverCrash) {
  const std::string good = ga::test::read_file(model_path(kCases[3]));  // v5.1 FP16
  std::vector<size_t> cuts;
  for (size_t n = 0; n < 4096; n += 3) cuts.push_back(n);
  for (size_t i = 1; i < 48; ++i) cuts.push_back(good.size() * i / 48);
  int errors = 0;
  for (const size_t n : cuts) {
    const std::string path = scratch_file("cut.bin", good.substr(0, n));
    try {
      (void)ga::load_model(path);
      ADD_FAILURE() << "a file cut at " << n << " of " << good.size() << " bytes loaded";
    } catch (const ga::Error&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors, static_cast<int>(cuts.size()));
  uint32_t seed = 12345;
  for (int i = 0; i < 300; ++i) {
    seed = seed * 1664525u + 1013904223u;
    std::string bad = good;
    const size_t at = (seed >> 8) % 600;
    bad[at] = static_cast<char>(bad[at] ^ (1 << ((seed >> 4) % 8)));
    try {
      const ga::LoadedModel m = ga::load_model(scratch_file("flip.bin", bad));
      ga::SessionOptions opts;
      opts.n_threads = 1;
      ga::Session s(m, opts);
      (void)s.eval(std::vector<int32_t>{'a'});
    } catch (const ga::Error&) {
    }
  }
}

}  // namespace
